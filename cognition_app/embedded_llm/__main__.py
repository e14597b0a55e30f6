"""``python -m cognition_app.embedded_llm``: serve the embedded model until SIGTERM or SIGINT."""

import sys

from cognition_app.embedded_llm.server import main

sys.exit(main())
