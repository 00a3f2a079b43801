from orchrm_dagster.app.cli import main

main()
