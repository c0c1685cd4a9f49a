// Command kube runs one Kubernetes component of k8s.io/kubernetes, chosen by
// its first argument or, when invoked through a link, by its own name:
// apiserver, controller-manager, scheduler, kubelet, proxy or kubectl (and
// `cel`, the scheduler's DRA CEL selector evaluation alone: cel.go). One
// binary links the shared dependency graph once instead of six times (the
// same trick as k3s); each component gets exactly the command its upstream
// main builds, with the same side-effect imports.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	_ "time/tzdata" // CronJob time zones (apiserver, controller-manager)

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl: client auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = "usage: kube apiserver|controller-manager|scheduler|kubelet|proxy|kubectl [flags] | kube cel < input.json\n"

func main() {
	name := strings.TrimPrefix(filepath.Base(os.Args[0]), "kube-")
	if name == "kube" {
		if len(os.Args) < 2 {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		// Drop our own name so each command sees the argv its upstream main sees.
		os.Args = os.Args[1:]
		name = os.Args[0]
	}
	var cmd *cobra.Command
	switch name {
	case "apiserver":
		cmd = apiserver.NewAPIServerCommand()
	case "controller-manager":
		cmd = controllermanager.NewControllerManagerCommand()
	case "scheduler":
		cmd = scheduler.NewSchedulerCommand()
	case "kubelet":
		cmd = kubelet.NewKubeletCommand(context.Background())
	case "proxy":
		cmd = proxy.NewProxyCommand()
	case "cel":
		os.Exit(celMain(os.Args[1:]))
	case "kubectl", "ctl":
		// As k8s.io/kubernetes/cmd/kubectl: verbosity first, errors printed by kubectl.
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	default:
		fmt.Fprintf(os.Stderr, "kube: unknown component %q\n%s", name, usage)
		os.Exit(2)
	}
	os.Exit(cli.Run(cmd))
}
