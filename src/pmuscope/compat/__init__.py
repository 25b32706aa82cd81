"""Drop-in replacements for other tools' Python APIs, backed by pmuscope.

- :mod:`pmuscope.compat.geardvfs`: GearDVFS ``perf_lib`` (``PyPerf``):
  ``sys_perf``, ``get_supported_names/events/abbrevs``.
"""
