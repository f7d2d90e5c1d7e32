package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// identify returns the identity of the cluster the member reaches: the
// UID of its kube-system Namespace, which no two clusters share and
// which Cluster API, Argo CD and SIG-Multicluster's ClusterProperty
// cluster.clusterset.k8s.io use alike, read through the member's own
// transport and credentials, from the API server's watch cache
// (resourceVersion 0: no read of etcd on the engagement's path; the UID
// of kube-system, which cannot be deleted, never changes). Credentials
// that may not read it (403), or a cluster without it (404), fall back
// to "sha256:" and a hash of the server URL and CA: the same endpoint is
// the same cluster. Any other error is returned, and the member tries
// again at its next connection.
func (m *member) identify(ctx context.Context) (string, error) {
	namespaces, err := corev1client.NewForConfigAndClient(m.config, m.httpClient)
	if err != nil {
		return "", fmt.Errorf("building a client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, m.pool.opts.Health.Timeout)
	defer cancel()
	ns, err := namespaces.Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case err == nil && ns.UID != "":
		return string(ns.UID), nil
	case err == nil, apierrors.IsForbidden(err), apierrors.IsNotFound(err):
		cfg := m.creds.Load().config
		h := sha256.New()
		h.Write([]byte(cfg.Host))
		h.Write([]byte{0})
		h.Write(cfg.CAData)
		return addressIdentity + hex.EncodeToString(h.Sum(nil)), nil
	default:
		return "", fmt.Errorf("reading Namespace kube-system to identify the cluster: %w", err)
	}
}

// addressIdentity prefixes the identity of a cluster whose kube-system
// could not be read: a hash of its server URL and CA.
const addressIdentity = "sha256:"

// admit decides, before the member is engaged, whether it may be: it
// reads the cluster's identity and reports it to the registry, which
// says which name keeps the cluster. When another name does, it returns
// false: the registry refuses this name, and the pool removes its member.
// When this name does, it waits until no member of another name that
// reached the cluster still runs here (one the registry just refused),
// so that two names never work on one cluster at once.
func (m *member) admit(ctx context.Context) (bool, error) {
	p := m.pool
	if p.opts.AllowDuplicateClusters {
		return true, nil
	}
	select {
	case <-p.opts.Registry.Synced(): // the hub's records of every name are in
	case <-ctx.Done():
		return false, nil
	}
	id, err := m.identify(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false, nil // the member stops: no failure
		}
		return false, err
	}
	p.mu.Lock()
	m.clusterID = id
	p.mu.Unlock()
	if keeper := p.opts.Registry.Identify(m.name, m.creds.Load().fingerprint, id); keeper != m.name {
		if keeper != "" {
			m.log.Info("Not engaging member: another name registers the same cluster", "keeper", keeper)
		}
		return false, nil
	}
	for {
		p.mu.Lock()
		other, left := p.otherMember(m, id), p.left
		p.mu.Unlock()
		if other == "" {
			return true, nil
		}
		m.log.Info("Waiting for the member of another name of the same cluster to stop", "other", other)
		select {
		case <-left:
		case <-ctx.Done():
			return false, nil
		}
	}
}
