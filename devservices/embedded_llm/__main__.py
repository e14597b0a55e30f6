"""``python -m devservices.embedded_llm``: serve the embedded model until SIGTERM or SIGINT."""

import sys

from devservices.embedded_llm.server import main

sys.exit(main())
