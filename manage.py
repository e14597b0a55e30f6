#!/usr/bin/env python
import os
import sys

# Commands that a client program launches by itself (an MCP client runs ``mcp_stdio``) serve the
# deployment's data: without its database and Redis settings they stop here, in one line, before
# the settings module would find or start embedded servers of their own.
DEPLOYMENT_SETTINGS = {"mcp_stdio": ("DATABASE_URL", "REDIS_URL")}


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    missing = [name for name in DEPLOYMENT_SETTINGS.get(command, ()) if not os.environ.get(name)]
    if missing:
        print(
            f"manage.py {command}: {' and '.join(missing)} not set; set them to the deployment's "
            "database and Redis (`python -m chukwa_site.stack status` prints the local ones)",
            file=sys.stderr,
        )
        sys.exit(2)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chukwa_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
