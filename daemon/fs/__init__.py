"""File-system primitives every folder stage uses: folders held by descriptor (:mod:`daemon.fs.dirs`)."""
