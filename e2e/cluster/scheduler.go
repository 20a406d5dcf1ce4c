package main

import (
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	"k8s.io/component-base/cli"
)

// runScheduler is upstream cmd/kube-scheduler's main (the default plugins, no
// out-of-tree ones). The scheduling benchmark (bench/bench_controlplane.py) compares
// Gleaner's placement rate with it on the same API server.
func runScheduler() int {
	return cli.Run(scheduler.NewSchedulerCommand())
}
