"""The web page (``perfpredict serve``): compare devices for one model, in a browser."""
