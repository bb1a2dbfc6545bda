from bench.ttft.run import main

main()
