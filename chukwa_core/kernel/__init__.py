"""The world kernel: world state, WorldPatch validation and application, rendering. Pure."""
