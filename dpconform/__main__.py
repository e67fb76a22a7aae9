from dpconform.cli import main

raise SystemExit(main())
