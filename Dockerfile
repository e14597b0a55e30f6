FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# The runtime only: no test tools, no embedded PostgreSQL/Redis, no embedded model (and so no
# llama.cpp compile). A deployment sets DATABASE_URL, REDIS_URL and CHUKWA_LLM_BASE_URL.
COPY requirements-runtime.txt .
RUN pip install --no-cache-dir -r requirements-runtime.txt
COPY . .
RUN DATABASE_URL=postgres://x@localhost/x REDIS_URL=redis://localhost DJANGO_SECRET_KEY=build \
    python manage.py collectstatic --noinput -v 0
EXPOSE 8000
# Threaded workers (chukwa_site/gunicorn_conf.py; CHUKWA_WEB_WORKERS / CHUKWA_WEB_THREADS).
CMD ["gunicorn", "-c", "python:chukwa_site.gunicorn_conf", "--bind", "0.0.0.0:8000"]

# Optional: Flower for docker-compose's "monitoring" profile (`docker compose build` picks this
# stage by its target); the runtime image below stays without it.
FROM runtime AS flower
COPY requirements-monitoring.txt .
RUN pip install --no-cache-dir -r requirements-monitoring.txt

# The default image (`docker build .`): the runtime.
FROM runtime
