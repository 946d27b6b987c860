# compiler-digest: the service (`digest serve`: web app, bots, daily schedule) in one container.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    DIGEST_VAR_DIR=/var/lib/digest DIGEST_MAIL_OUTBOX=/var/lib/digest/outbox DIGEST_LOG_JSON=1

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY alembic ./alembic
COPY templates ./templates
COPY digest ./digest
COPY bot ./bot
RUN pip install . \
    && useradd --system --home-dir /var/lib/digest --create-home digest

USER digest
EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"
CMD ["digest", "serve", "--host", "0.0.0.0", "--port", "8000"]
