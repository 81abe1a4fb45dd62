from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "webapp.accounts"
    label = "accounts"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in, user_login_failed

        from webapp.accounts import throttle

        user_login_failed.connect(throttle.on_login_failed, dispatch_uid="accounts.throttle.failed")
        user_logged_in.connect(throttle.on_logged_in, dispatch_uid="accounts.throttle.logged_in")
