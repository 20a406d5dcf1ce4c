// Command glcluster is a single binary holding the upstream Kubernetes control-plane
// components that Gleaner's tests run against a real API server (see
// docs/controlplane.md): etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and the KWOK controller, each selected by its first argument, the way the old hyperkube binary
// did. One binary links the shared Kubernetes packages once, which halves the link
// time and the disk of four separate binaries.
//
// Usage:
//
//	glcluster etcd --data-dir DIR --listen-client-url URL --listen-peer-url URL
//	glcluster kube-apiserver [upstream kube-apiserver flags]
//	glcluster kube-controller-manager [upstream kube-controller-manager flags]
//	glcluster kwok [upstream kwok flags]
//	glcluster scheduler [upstream kube-scheduler flags]
//	glcluster kwok-default-stages   # print KWOK's upstream "fast" node and pod stages
//	glcluster version
//
// Every subcommand other than etcd, kwok-default-stages and version is the upstream
// main function unchanged: this file only rewrites os.Args so that the upstream
// command sees its own flags.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// subcommand runs one component; it returns the process exit code.
type subcommand func() int

var subcommands = map[string]subcommand{
	"etcd":                    runEtcd,
	"kube-apiserver":          runAPIServer,
	"kube-controller-manager": runControllerManager,
	"kwok":                    runKwok,
	"kwok-default-stages":     printKwokStages,
	"scheduler":               runScheduler,
	"version":                 printVersion,
}

func usage() {
	names := make([]string, 0, len(subcommands))
	for name := range subcommands {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: %s {%s} [flags]\n", os.Args[0], strings.Join(names, "|"))
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	run, ok := subcommands[os.Args[1]]
	if !ok {
		usage()
		os.Exit(2)
	}
	// The upstream commands parse os.Args[1:] themselves (cobra, pflag): drop the
	// subcommand name so that they see exactly the flags meant for them.
	os.Args = append([]string{os.Args[1]}, os.Args[2:]...)
	os.Exit(run())
}
