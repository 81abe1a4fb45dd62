"""The settings of the web servers the tests start (tests.processes.asgi_server): the product's own, with
the fast password hasher the test process uses too (tests/conftest.py). Hashing a password properly costs
~0.4 s; every browser test made five users and signed in at least once, on both sides."""

from webapp.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
