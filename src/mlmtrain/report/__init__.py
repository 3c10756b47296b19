"""Reading run folders back: their metrics and config, the health checks, the HTML page. It imports no training
code."""
