from cluster_curate.cli import main

main()
