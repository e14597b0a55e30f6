"""Django's PostgreSQL backend with a health check that costs no round trip while the server has
said nothing (``chukwa_site.postgresql.base``)."""
