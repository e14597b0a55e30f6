"""The authoring pages for operators: the workflow editor (``views``) with its preview, pickers
and review before saving, and creating a world from a scenario (``worlds``)."""
