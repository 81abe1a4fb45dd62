"""`python -m trainers.importers {trl,verl} PATH …` (see trainers.importers.cli)."""

from trainers.importers.cli import main

raise SystemExit(main())
