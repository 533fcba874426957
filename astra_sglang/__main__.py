from astra_sglang.cli.main import main

raise SystemExit(main())
