package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"sigs.k8s.io/kwok/kustomize/stage/node/fast"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

// runKwok is upstream cmd/kwok's main, returning its exit code instead of exiting.
func runKwok() int {
	// Kubernetes' packages linked into this binary register a non-boolean --version on
	// pflag's global set at init; cobra merges that set into KWOK's command, whose own
	// --version is boolean, and refuses to run. KWOK uses no global flag of theirs.
	pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)

	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, flagset)
	ctx, err := config.InitFlags(ctx, flagset)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flagset.FlagUsages()))
		logger.Error("Init config flags", "err", err)
		return 1
	}
	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		return 1
	}
	return 0
}

// printKwokStages prints KWOK's upstream "fast" stages as one multi-document YAML: nodes
// turn Ready at once, pods bound to them turn Running, complete and are deleted. The
// kwok controller takes no stages by default, so the harness passes this to --config.
func printKwokStages() int {
	for _, doc := range []string{fast.DefaultNodeInit, podfast.DefaultPodReady, podfast.DefaultPodComplete, podfast.DefaultPodDelete} {
		fmt.Printf("---\n%s\n", doc)
	}
	return 0
}
