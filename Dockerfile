FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN DATABASE_URL=postgres://x@localhost/x REDIS_URL=redis://localhost DJANGO_SECRET_KEY=build \
    python manage.py collectstatic --noinput -v 0
EXPOSE 8000
CMD ["gunicorn", "chukwa_site.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
