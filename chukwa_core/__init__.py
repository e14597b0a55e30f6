"""The Django-free core: identifiers, canonical JSON and hashing, the error family, component
and workflow validation, the WorldPatch schema and kernel, the rule policy. Nothing here imports
Django or any app; tests import it without a database."""
