from queuelog.cli import main

raise SystemExit(main())
