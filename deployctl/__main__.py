from deployctl.cli import main

raise SystemExit(main())
