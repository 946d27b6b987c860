"""``python -m digest`` runs the CLI."""

from digest.cli import main

raise SystemExit(main())
