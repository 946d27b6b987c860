"""``python -m digest`` runs the CLI."""

from digest.cli.main import main

raise SystemExit(main())
