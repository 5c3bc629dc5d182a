"""The plugin registry (built-ins plus ``insitu`` entry points), the hook specifications and
the root names that plugins serve."""
