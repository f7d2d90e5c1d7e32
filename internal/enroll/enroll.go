package enroll

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// Labels on every member object Register creates, next to
// fleetv1alpha1.FleetIDLabel with the fleet's identity. Cleanup deletes only
// objects that carry all three, with the cluster's name and the fleet's
// identity, and, with proof, an earlier register's without the identity
// (see the package doc).
const (
	ManagedByLabel   = "app.kubernetes.io/managed-by"
	ManagedByValue   = "fleet-manager"
	ClusterNameLabel = "fleet.fleetkube.io/cluster-name"
)

// Names of the member objects.
const (
	// MemberNamespace holds the ServiceAccount and its token Role.
	MemberNamespace = "fleet-system"
	// ServiceAccountName is the identity the manager reaches the member as.
	ServiceAccountName = "fleet-manager"
	// TokenRoleName names the Role and RoleBinding that let the
	// ServiceAccount mint tokens for itself, and for no one else.
	TokenRoleName = "fleet-manager-token"
)

// Token lifetimes.
const (
	DefaultTokenTTL = 24 * time.Hour
	// MinTokenTTL is the shortest lifetime the TokenRequest API grants.
	MinTokenTTL = 10 * time.Minute
	// MaxTokenTTL is the longest lifetime Register asks for, as the
	// manager's renewal does.
	MaxTokenTTL = fleetv1alpha1.MaxTokenLifetime
)

// Presets are what Options.Preset may name: the built-in ClusterRoles,
// and FleetPreset.
var Presets = []string{"cluster-admin", "edit", "view", FleetPreset}

// redacted stands for the token in what Register returns.
const redacted = "<redacted>"

// DryRun is kubectl's --dry-run: none, client or server.
type DryRun string

const (
	// DryRunNone writes.
	DryRunNone DryRun = "none"
	// DryRunClient sends nothing to either cluster.
	DryRunClient DryRun = "client"
	// DryRunServer sends the writes with dryRun=All; no token is minted.
	DryRunServer DryRun = "server"
)

// Options say what Register does.
type Options struct {
	// Name is the cluster name, and the hub Secret's name: a DNS-1123
	// subdomain. Required.
	Name string
	// Preset is cluster-admin, edit or view, the built-in ClusterRole the
	// ServiceAccount is bound to, or FleetPreset, rules computed from the
	// hub's Propagations. Exactly one of Preset and ClusterRole.
	Preset string
	// ClusterRole names an existing ClusterRole to bind instead.
	ClusterRole string
	// Namespaces, when set, bind the ClusterRole with a RoleBinding in
	// each of these existing namespaces instead of cluster-wide (for
	// FleetPreset, a Role of its rules). Not with Preset cluster-admin.
	Namespaces []string
	// TokenTTL is the lifetime asked of the TokenRequest API; the API
	// server may shorten it. Default DefaultTokenTTL, at least MinTokenTTL
	// and at most MaxTokenTTL.
	TokenTTL time.Duration
	// Server is the member's URL as the hub reaches it. Default: the
	// server of the person's kubeconfig.
	Server string
	// Labels are the cluster's labels, set on the hub Secret next to
	// registry.KubeconfigLabel; others already on it are kept.
	Labels map[string]string
	// HubNamespace is the fleet namespace on the hub. Default fleet-system.
	HubNamespace string
	// DryRun defaults to DryRunNone.
	DryRun DryRun
}

// Validate defaults o's unset fields and says what is wrong with the rest.
func (o *Options) Validate() error {
	if o.TokenTTL == 0 {
		o.TokenTTL = DefaultTokenTTL
	}
	if o.HubNamespace == "" {
		o.HubNamespace = MemberNamespace
	}
	if o.DryRun == "" {
		o.DryRun = DryRunNone
	}
	var errs []error
	if err := registry.ValidateName(o.Name); err != nil {
		errs = append(errs, err)
	}
	switch {
	case o.Preset == "" && o.ClusterRole == "":
		errs = append(errs, errors.New("name the permissions: a preset (cluster-admin, edit, view or fleet) or a ClusterRole"))
	case o.Preset != "" && o.ClusterRole != "":
		errs = append(errs, errors.New("a preset and a ClusterRole exclude each other"))
	case o.Preset != "" && !slices.Contains(Presets, o.Preset):
		errs = append(errs, fmt.Errorf("unknown permissions preset %q: want cluster-admin, edit, view or fleet", o.Preset))
	case o.Preset == "cluster-admin" && len(o.Namespaces) > 0:
		errs = append(errs, errors.New("cluster-admin is cluster-wide: use fleet, edit or view with namespaces"))
	}
	for _, ns := range o.Namespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if o.TokenTTL < MinTokenTTL {
		errs = append(errs, fmt.Errorf("token lifetime %s is shorter than the minimum, %s", o.TokenTTL, MinTokenTTL))
	}
	if o.TokenTTL > MaxTokenTTL {
		errs = append(errs, fmt.Errorf("token lifetime %s is longer than the maximum, %s", o.TokenTTL, MaxTokenTTL))
	}
	if o.Server != "" {
		if u, err := url.Parse(o.Server); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("server %q is not an https:// URL", o.Server))
		}
	}
	if err := ValidateLabels(o.Labels); err != nil {
		errs = append(errs, err)
	}
	switch o.DryRun {
	case DryRunNone, DryRunClient, DryRunServer:
	default:
		errs = append(errs, fmt.Errorf("dry run %q: want none, client or server", o.DryRun))
	}
	return errors.Join(errs...)
}

// ParseLabels parses k=v,k2=v2 into labels, and validates them.
func ParseLabels(s string) (map[string]string, error) {
	labels := map[string]string{}
	if s == "" {
		return labels, nil
	}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("label %q is not key=value", kv)
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("label %q is given twice", k)
		}
		labels[k] = v
	}
	return labels, ValidateLabels(labels)
}

// ValidateLabels checks labels as the API server would, and refuses the
// label that marks the Secret as a registration.
func ValidateLabels(labels map[string]string) error {
	var errs []error
	for k, v := range labels {
		if k == registry.KubeconfigLabel {
			errs = append(errs, fmt.Errorf("label %s is set by register itself", k))
			continue
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label key %q: %s", k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %s value %q: %s", k, v, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// UnreachableError: the member did not answer at Server.
type UnreachableError struct {
	Server string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the member at %s: %v", e.Server, e.Err)
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// ForbiddenError: the person's member credentials may not Verb Resource.
type ForbiddenError struct {
	Verb     string // e.g. create
	Resource string // e.g. ClusterRoleBindings
	Err      error
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("your member credentials may not %s %s: %v", e.Verb, e.Resource, e.Err)
}
func (e *ForbiddenError) Unwrap() error { return e.Err }

// Change is what happened, or would happen, to one object.
type Change struct {
	// Object as written, apiVersion and kind set; the hub Secret's token
	// is redacted and its kubeconfig is under stringData.
	Object client.Object
	// Op is created, configured, unchanged, deleted, or kept (by Cleanup,
	// which then says why in Reason).
	Op     string
	Reason string
}

// Result is what Register did.
type Result struct {
	// Member are the member objects in the order written, then the ones
	// deleted as no longer wanted (a changed preset's old binding).
	Member []Change
	// Secret is the hub's registration Secret.
	Secret Change
	// SecretVersion is the resourceVersion Register wrote the hub's
	// registration Secret at: the manager has read it once a
	// MemberCluster's status.observedSecretVersion says so.
	SecretVersion string
	// TokenExpiry is when the minted token expires; zero in a dry run.
	TokenExpiry time.Time
	// PreviousServer is the server the hub Secret registered before,
	// when Register pointed it at another one; empty otherwise.
	PreviousServer string
	// Warnings say what Register could not do, or what the rights allow,
	// that the person should know.
	Warnings []string
	// Rights are FleetPreset's rules; nil for other permissions.
	Rights *FleetRights
}

// Objects returns the objects of r, member ones first, for printing.
func (r *Result) Objects() []client.Object {
	var objs []client.Object
	for _, c := range r.Member {
		if c.Op != "deleted" {
			objs = append(objs, c.Object)
		}
	}
	return append(objs, r.Secret.Object)
}

// Register registers the member that member, the person's REST config,
// reaches, with the fleet on hub, as o says. The person's credentials in
// member are used to write the member's objects and mint the token, and
// are never copied. hub may be nil for DryRunClient, whose objects then
// carry no fleet identity, except with FleetPreset, which reads the hub's
// Propagations and the member's kinds even then.
//
// Register reads the fleet's identity on the hub, creating it if missing
// (registry.FleetID; in a server dry run it is not kept), and touches in
// the member only objects that carry it, or, once, an earlier register's
// objects without one when the hub Secret of the name already points at
// this member's server: those it stamps. Anything else of the same name
// makes it fail before it writes.
func Register(ctx context.Context, member *rest.Config, hub client.Client, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	conn, err := connection(member, o.Server)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	if w := PresetWarning(o); w != "" {
		res.Warnings = append(res.Warnings, w)
	}
	mc, err := NewClient(member)
	if err != nil {
		return nil, err
	}
	if o.Preset == FleetPreset {
		if res.Rights, err = fleetRights(ctx, hub, mc.RESTMapper(), o.Namespaces); err != nil {
			return nil, err
		}
		res.Warnings = append(res.Warnings, res.Rights.Skipped...)
	}
	if o.DryRun == DryRunClient {
		secret, err := registrationSecret(o, conn, redacted)
		if err != nil {
			return nil, err
		}
		for _, obj := range memberObjects(o, "", res.Rights) {
			res.Member = append(res.Member, Change{Object: obj, Op: "created"})
		}
		res.Secret = Change{Object: printable(secret), Op: "created"}
		return res, nil
	}

	previous, err := readRegistration(ctx, hub, o)
	if err != nil {
		return nil, err
	}
	writer := hub
	if o.DryRun == DryRunServer {
		writer = client.NewDryRunClient(hub)
	}
	id, err := registry.FleetID(ctx, hub, writer, o.HubNamespace)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the hub has no namespace %s: install the manager (deploy/) or choose --namespace", o.HubNamespace)
	}
	if err != nil {
		return nil, err
	}
	server := displayServer(conn.server)
	if previous != "" && previous != server {
		res.PreviousServer = previous
		res.Warnings = append(res.Warnings, fmt.Sprintf("the hub Secret %s/%s registered %q at %s; it now points at %s",
			o.HubNamespace, o.Name, o.Name, previous, server))
	}

	m := &memberWriter{
		c: mc, name: o.Name, id: id, hubSecret: o.HubNamespace + "/" + o.Name, server: conn.personServer,
		dryRun: o.DryRun == DryRunServer, proven: previous != "" && previous == server,
	}
	want := memberObjects(o, id, res.Rights)
	if err := m.check(ctx, o, want); err != nil {
		return nil, err
	}
	if res.Member, err = m.apply(ctx, want); err != nil {
		return nil, err
	}
	pruned, warning, err := m.prune(ctx, want)
	if err != nil {
		return nil, err
	}
	res.Member = append(res.Member, pruned...)
	res.Warnings = append(res.Warnings, m.warnings...)
	if warning != "" {
		res.Warnings = append(res.Warnings, warning)
	}

	token := redacted
	secret, err := registrationSecret(o, conn, token)
	if err != nil {
		return nil, err
	}
	if !m.dryRun {
		tok, expiry, err := mintToken(ctx, mc, o.TokenTTL)
		if err != nil {
			return nil, err
		}
		token, res.TokenExpiry = tok, expiry
		if secret, err = registrationSecret(o, conn, token); err != nil {
			return nil, err
		}
	}
	op, version, err := writeSecret(ctx, hub, secret, m.dryRun)
	if err != nil {
		return nil, scrub(err, token)
	}
	if secret, err = registrationSecret(o, conn, redacted); err != nil {
		return nil, err
	}
	res.Secret = Change{Object: printable(secret), Op: op}
	res.SecretVersion = version
	return res, nil
}

// Scheme holds the types enroll reads and writes in a member.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// NewClient returns a client for the member that cfg, the person's REST
// config, reaches.
func NewClient(cfg *rest.Config) (client.Client, error) {
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, fmt.Errorf("member client: %w", err)
	}
	return c, nil
}

// conn is how the hub reaches the member: never a credential.
type conn struct {
	personServer string // the server the person reaches, for errors
	server       string // the server the hub reaches
	caData       []byte
	serverName   string
}

// connection reads the member's server and CA from the person's config;
// server, when set, replaces the server.
func connection(cfg *rest.Config, server string) (conn, error) {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return conn{}, fmt.Errorf("the member's server: %w", err)
	}
	c := conn{personServer: u.String(), server: u.String(), caData: cfg.CAData, serverName: cfg.ServerName}
	if server != "" {
		c.server = server
	}
	if len(c.caData) == 0 && cfg.CAFile != "" {
		// The person's kubeconfig is trusted, so is the file it names.
		if c.caData, err = os.ReadFile(cfg.CAFile); err != nil {
			return conn{}, fmt.Errorf("the member's CA: %w", err)
		}
	}
	if cfg.Insecure && len(c.caData) == 0 {
		return conn{}, fmt.Errorf("the member kubeconfig skips TLS verification (insecure-skip-tls-verify) and names no CA: the manager refuses insecure kubeconfigs, so add the member's certificate-authority to it")
	}
	return c, nil
}

// labels are the labels of the member objects of cluster name in the
// fleet of identity id; id is empty only in a client dry run.
func labels(name, id string) map[string]string {
	l := map[string]string{ManagedByLabel: ManagedByValue, ClusterNameLabel: name}
	if id != "" {
		l[fleetv1alpha1.FleetIDLabel] = id
	}
	return l
}

// memberObjects are the member objects o wants in the fleet of identity
// id, in the order they are written; rights are FleetPreset's.
func memberObjects(o Options, id string, rights *FleetRights) []client.Object {
	meta := func(namespace, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels(o.Name, id)}
	}
	sa := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: MemberNamespace, Name: ServiceAccountName}}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: meta("", MemberNamespace)},
		&corev1.ServiceAccount{ObjectMeta: meta(MemberNamespace, ServiceAccountName)},
		&rbacv1.Role{
			ObjectMeta: meta(MemberNamespace, TokenRoleName),
			Rules: []rbacv1.PolicyRule{{
				APIGroups:     []string{""},
				Resources:     []string{"serviceaccounts/token"},
				Verbs:         []string{"create"},
				ResourceNames: []string{ServiceAccountName},
			}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: meta(MemberNamespace, TokenRoleName),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: TokenRoleName},
			Subjects:   sa,
		},
	}
	if rights != nil {
		return append(objs, fleetObjects(o, meta, sa, rights)...)
	}
	role := o.Preset
	if role == "" {
		role = o.ClusterRole
	}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	name := "fleet-manager:" + role
	if len(o.Namespaces) == 0 {
		return append(objs, &rbacv1.ClusterRoleBinding{ObjectMeta: meta("", name), RoleRef: ref, Subjects: sa})
	}
	for _, ns := range o.Namespaces {
		objs = append(objs, &rbacv1.RoleBinding{ObjectMeta: meta(ns, name), RoleRef: ref, Subjects: sa})
	}
	return objs
}

// mintToken asks the member's TokenRequest API for a token of the
// ServiceAccount.
func mintToken(ctx context.Context, c client.Client, ttl time.Duration) (string, time.Time, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: MemberNamespace, Name: ServiceAccountName}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl.Seconds()))}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		if apierrors.IsForbidden(err) {
			return "", time.Time{}, &ForbiddenError{Verb: "create", Resource: "ServiceAccount tokens", Err: err}
		}
		return "", time.Time{}, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", MemberNamespace, ServiceAccountName, err)
	}
	if tr.Status.Token == "" {
		return "", time.Time{}, fmt.Errorf("the member's TokenRequest API returned no token for %s/%s", MemberNamespace, ServiceAccountName)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

// registrationSecret is the hub Secret that registers the member with
// token.
func registrationSecret(o Options, c conn, token string) (*corev1.Secret, error) {
	const user = "fleet-manager"
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{o.Name: {Server: c.server, CertificateAuthorityData: c.caData, TLSServerName: c.serverName}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{o.Name: {Cluster: o.Name, AuthInfo: user}},
		CurrentContext: o.Name,
	})
	if err != nil {
		return nil, fmt.Errorf("writing the member's kubeconfig: %w", scrub(err, token))
	}
	l := map[string]string{registry.KubeconfigLabel: "true"}
	for k, v := range o.Labels {
		l[k] = v
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.HubNamespace, Name: o.Name, Labels: l},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{registry.KubeconfigKey: kubeconfig},
	}, nil
}

// printable returns s, whose token is redacted, with its data as
// stringData, so that the kubeconfig reads as text.
func printable(s *corev1.Secret) *corev1.Secret {
	s = s.DeepCopy()
	s.StringData = map[string]string{}
	for k, v := range s.Data {
		s.StringData[k] = string(v)
	}
	s.Data = nil
	return s
}

// readRegistration returns the server the hub Secret of o's name
// registers, or "" when there is no such Secret. It refuses a Secret that
// is not a native registration.
func readRegistration(ctx context.Context, hub client.Client, o Options) (string, error) {
	var s corev1.Secret
	err := hub.Get(ctx, client.ObjectKey{Namespace: o.HubNamespace, Name: o.Name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading Secret %s/%s on the hub: %w", o.HubNamespace, o.Name, err)
	case s.Labels[registry.KubeconfigLabel] != "true":
		return "", fmt.Errorf("Secret %s/%s exists on the hub and is not a registration (no label %s=true): refusing to overwrite it", o.HubNamespace, o.Name, registry.KubeconfigLabel)
	}
	return registeredServer(&s), nil
}

// registeredServer returns the server of the current context of the
// kubeconfig in registration Secret s, without any userinfo; "" if it has
// none. The kubeconfig is only parsed, never used.
func registeredServer(s *corev1.Secret) string {
	cfg, err := clientcmd.Load(s.Data[registry.KubeconfigKey])
	if err != nil {
		return ""
	}
	if kc := cfg.Contexts[cfg.CurrentContext]; kc != nil && cfg.Clusters[kc.Cluster] != nil {
		return displayServer(cfg.Clusters[kc.Cluster].Server)
	}
	return ""
}

// displayServer is server without userinfo, which may be a credential.
func displayServer(server string) string {
	s, err := kubeconfig.WithoutUserinfo(server)
	if err != nil {
		return "(a server that is not a URL)"
	}
	return s
}

// writeSecret creates s on the hub, or updates the registration Secret of
// that name in place, and returns what it did and the resourceVersion
// written.
func writeSecret(ctx context.Context, hub client.Client, s *corev1.Secret, dryRun bool) (op, version string, _ error) {
	var opts []client.CreateOption
	var uopts []client.UpdateOption
	if dryRun {
		opts, uopts = []client.CreateOption{client.DryRunAll}, []client.UpdateOption{client.DryRunAll}
	}
	created := s.DeepCopy()
	err := hub.Create(ctx, created, opts...)
	if err == nil {
		return "created", created.ResourceVersion, nil
	}
	if apierrors.IsNotFound(err) {
		return "", "", fmt.Errorf("the hub has no namespace %s: install the manager (deploy/) or choose --namespace", s.Namespace)
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", "", fmt.Errorf("creating Secret %s/%s on the hub: %w", s.Namespace, s.Name, err)
	}
	var cur corev1.Secret
	if err := hub.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
		return "", "", fmt.Errorf("reading Secret %s/%s on the hub: %w", s.Namespace, s.Name, err)
	}
	if cur.Labels[registry.KubeconfigLabel] != "true" {
		return "", "", fmt.Errorf("Secret %s/%s exists on the hub and is not a registration (no label %s=true): refusing to overwrite it", s.Namespace, s.Name, registry.KubeconfigLabel)
	}
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	for k, v := range s.Labels {
		cur.Labels[k] = v
	}
	if cur.Data == nil {
		cur.Data = map[string][]byte{}
	}
	cur.Data[registry.KubeconfigKey] = s.Data[registry.KubeconfigKey]
	if err := hub.Update(ctx, &cur, uopts...); err != nil {
		return "", "", fmt.Errorf("updating Secret %s/%s on the hub: %w", s.Namespace, s.Name, err)
	}
	return "configured", cur.ResourceVersion, nil
}

// scrub removes token from err's message.
func scrub(err error, token string) error {
	if err == nil || token == "" || token == redacted || !strings.Contains(err.Error(), token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), token, redacted))
}
