"""The commands on top: the command line, the collect/analyze pipeline (the only loops over
``collectors.COLLECTORS``), upload, fleet and drill. Imports every floor below it."""
