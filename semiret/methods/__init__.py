"""One recipe per paper: configuration, data, loss and the call to the trainer, composed from the shared
layers (``data``, ``text``, ``models``, ``indexes``, ``search``, ``training``). Nothing below imports a recipe."""
