package main

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// completeMembers completes the names of the hub's members, those args
// name already left out, as kubectl completes resource names.
func completeMembers(hub *hubFlags) cobra.CompletionFunc {
	return completeNames(hub, func(ctx context.Context, c client.Client) ([]string, error) {
		var list fleetv1alpha1.MemberClusterList
		err := c.List(ctx, &list)
		names := make([]string, len(list.Items))
		for i, mc := range list.Items {
			names[i] = mc.Name
		}
		return names, err
	})
}

// completeMember completes the one member name a command takes.
func completeMember(hub *hubFlags) cobra.CompletionFunc {
	return completeOnlyFirst(completeMembers(hub))
}

// completePropagations completes the names of the Propagations of the
// namespace ns names (see hubNamespace).
func completePropagations(hub *hubFlags, ns *string) cobra.CompletionFunc {
	return completeNames(hub, func(ctx context.Context, c client.Client) ([]string, error) {
		namespace, err := hubNamespace(hub, *ns)
		if err != nil {
			return nil, err
		}
		var list fleetv1alpha1.PropagationList
		err = c.List(ctx, &list, client.InNamespace(namespace))
		names := make([]string, len(list.Items))
		for i, p := range list.Items {
			names[i] = p.Name
		}
		return names, err
	})
}

// completeNamespaces completes the hub's namespaces, for -n.
func completeNamespaces(hub *hubFlags) cobra.CompletionFunc {
	complete := completeNames(hub, func(ctx context.Context, c client.Client) ([]string, error) {
		var list corev1.NamespaceList
		err := c.List(ctx, &list)
		names := make([]string, len(list.Items))
		for i, ns := range list.Items {
			names[i] = ns.Name
		}
		return names, err
	})
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return complete(cmd, nil, toComplete)
	}
}

// completeNames completes the names list reads from the hub that start
// with what is typed, those already in args left out. It never asks for
// input: a kubeconfig whose exec plugin would prompt completes nothing.
func completeNames(hub *hubFlags, list func(context.Context, client.Client) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		cfg, err := personConfig("hub", hub.kubeconfig, hub.context, nil)
		if err != nil {
			cobra.CompDebugln(err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			cobra.CompDebugln(err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, err := list(cmd.Context(), c)
		if err != nil {
			cobra.CompDebugln(err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var matching []string
		for _, name := range names {
			if strings.HasPrefix(name, toComplete) && !slices.Contains(args, name) {
				matching = append(matching, name)
			}
		}
		slices.Sort(matching)
		return matching, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeOnlyFirst completes with complete only the first argument.
func completeOnlyFirst(complete cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return complete(cmd, args, toComplete)
	}
}
