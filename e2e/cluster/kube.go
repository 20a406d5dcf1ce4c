package main

import (
	"fmt"
	_ "time/tzdata" // CronJob time zones, as in the upstream mains

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	"k8s.io/component-base/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

// runAPIServer is upstream cmd/kube-apiserver's main.
func runAPIServer() int {
	return cli.Run(apiserver.NewAPIServerCommand())
}

// runControllerManager is upstream cmd/kube-controller-manager's main.
func runControllerManager() int {
	return cli.Run(controllermanager.NewControllerManagerCommand())
}

// printVersion prints the Kubernetes version the binary was built from, as
// "kubernetes <gitVersion>"; the harness reads it to check that the binary is current.
func printVersion() int {
	fmt.Println("kubernetes", version.Get().GitVersion)
	return 0
}
