package member

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"weak"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// lazyMapper is controller-runtime's lazy REST mapper
// (apiutil.NewDynamicRESTMapper) without aggregated discovery, whose
// discovery results are shared between members: a member learns the
// resources of an API group version when one of its clients first needs
// it, as controller-runtime's does, but the resources it learns, and the
// mapper built from them, are those of every member that learned the
// same documents. Members of one Kubernetes version hold one copy of the
// built-in groups' mappings, not one each (about 100 KiB a member for
// the core group alone).
//
// What the mapper answers is what controller-runtime's would: its
// documents, and the mapper built from them, are the same; only their
// copies are shared, and never modified once shared.
type lazyMapper struct {
	client discovery.DiscoveryInterface

	// mu guards the fields below.
	mu     sync.RWMutex
	mapper meta.RESTMapper
	// known are the groups whose resources the mapper maps, each shared
	// (internedGroup) and never modified: a change replaces it.
	known map[string]*restmapper.APIGroupResources
	// groups are the member's API groups, from /api and /apis, read
	// once a version is first needed and again when a group goes; they
	// point into groupList, shared (internedGroupList).
	groups        map[string]*metav1.APIGroup
	groupList     *metav1.APIGroupList
	groupsFetched bool
}

func newLazyMapper(cfg *rest.Config, httpClient *http.Client) (*lazyMapper, error) {
	client, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &lazyMapper{
		client: client,
		mapper: internedMapper(nil),
		known:  map[string]*restmapper.APIGroupResources{},
		groups: map[string]*metav1.APIGroup{},
	}, nil
}

func (m *lazyMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	res, err := m.getMapper().KindFor(resource)
	if meta.IsNoMatchError(err) {
		if err := m.addKnownGroupAndReload(resource.Group, resource.Version); err != nil {
			return schema.GroupVersionKind{}, err
		}
		res, err = m.getMapper().KindFor(resource)
	}
	return res, err
}

func (m *lazyMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	res, err := m.getMapper().KindsFor(resource)
	if meta.IsNoMatchError(err) {
		if err := m.addKnownGroupAndReload(resource.Group, resource.Version); err != nil {
			return nil, err
		}
		res, err = m.getMapper().KindsFor(resource)
	}
	return res, err
}

func (m *lazyMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	res, err := m.getMapper().ResourceFor(input)
	if meta.IsNoMatchError(err) {
		if err := m.addKnownGroupAndReload(input.Group, input.Version); err != nil {
			return schema.GroupVersionResource{}, err
		}
		res, err = m.getMapper().ResourceFor(input)
	}
	return res, err
}

func (m *lazyMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	res, err := m.getMapper().ResourcesFor(input)
	if meta.IsNoMatchError(err) {
		if err := m.addKnownGroupAndReload(input.Group, input.Version); err != nil {
			return nil, err
		}
		res, err = m.getMapper().ResourcesFor(input)
	}
	return res, err
}

func (m *lazyMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	res, err := m.getMapper().RESTMapping(gk, versions...)
	if meta.IsNoMatchError(err) {
		if err := m.addKnownGroupAndReload(gk.Group, versions...); err != nil {
			return nil, err
		}
		res, err = m.getMapper().RESTMapping(gk, versions...)
	}
	return res, err
}

func (m *lazyMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	res, err := m.getMapper().RESTMappings(gk, versions...)
	if meta.IsNoMatchError(err) {
		if err := m.addKnownGroupAndReload(gk.Group, versions...); err != nil {
			return nil, err
		}
		res, err = m.getMapper().RESTMappings(gk, versions...)
	}
	return res, err
}

func (m *lazyMapper) ResourceSingularizer(resource string) (string, error) {
	return m.getMapper().ResourceSingularizer(resource)
}

func (m *lazyMapper) getMapper() meta.RESTMapper {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.mapper
}

// addKnownGroupAndReload learns the resources of versions of groupName
// (all its versions if none is given) and rebuilds the mapper, as
// controller-runtime's mapper does.
func (m *lazyMapper) addKnownGroupAndReload(groupName string, versions ...string) error {
	if len(versions) == 1 && versions[0] == "" {
		versions = nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(versions) == 0 || !m.groupsFetched {
		group, err := m.findGroupLocked(groupName)
		if err != nil {
			return err
		}
		if group != nil && len(versions) == 0 {
			for _, v := range group.Versions {
				versions = append(versions, v.Version)
			}
		}
	}
	resources, err := m.fetchLocked(groupName, versions...)
	if err != nil {
		return fmt.Errorf("failed to get API group resources: %w", err)
	}
	m.addLocked(resources)
	return nil
}

// findGroupLocked returns groupName's API group, reading the member's
// groups unless it is known; nil if the member serves no such group.
func (m *lazyMapper) findGroupLocked(groupName string) (*metav1.APIGroup, error) {
	if group, ok := m.groups[groupName]; ok {
		return group, nil
	}
	groups, err := m.client.ServerGroups()
	if err != nil {
		return nil, fmt.Errorf("failed to get server groups: %w", err)
	}
	if len(groups.Groups) == 0 {
		return nil, fmt.Errorf("received an empty API groups list")
	}
	m.groupsFetched = true
	groups = internedGroupList(groups)
	m.groupList = groups
	for i := range groups.Groups {
		m.groups[groups.Groups[i].Name] = &groups.Groups[i]
	}
	return m.groups[groupName], nil
}

// fetchLocked reads the resources of versions of groupName. A version
// the member no longer serves forgets the group, to be read again at the
// next miss.
func (m *lazyMapper) fetchLocked(groupName string, versions ...string) (map[schema.GroupVersion]*metav1.APIResourceList, error) {
	resources := map[schema.GroupVersion]*metav1.APIResourceList{}
	failed := map[schema.GroupVersion]error{}
	for _, version := range versions {
		gv := schema.GroupVersion{Group: groupName, Version: version}
		list, err := m.client.ServerResourcesForGroupVersion(gv.String())
		if apierrors.IsNotFound(err) {
			if group, ok := m.groups[groupName]; ok && slices.ContainsFunc(group.Versions, func(v metav1.GroupVersionForDiscovery) bool { return v.Version == version }) {
				delete(m.groups, groupName)
			}
			if known, ok := m.known[groupName]; ok && known.VersionedResources[version] != nil {
				delete(m.known, groupName)
			}
			continue
		} else if err != nil {
			failed[gv] = err
		}
		if list != nil {
			resources[gv] = list
		}
	}
	if len(failed) > 0 {
		err := apiutil.ErrResourceDiscoveryFailed(failed)
		return nil, &err
	}
	return resources, nil
}

// addLocked adds resources to the known groups, replacing each group it
// changes by a changed copy, and rebuilds the mapper.
func (m *lazyMapper) addLocked(resources map[schema.GroupVersion]*metav1.APIResourceList) {
	for gv, list := range resources {
		group := &restmapper.APIGroupResources{Group: metav1.APIGroup{Name: gv.Group}}
		if old, ok := m.known[gv.Group]; ok {
			group.Group = old.Group
			group.VersionedResources = maps.Clone(old.VersionedResources)
		}
		group.Group.Versions = slices.Clone(group.Group.Versions)
		if group.VersionedResources == nil {
			group.VersionedResources = map[string][]metav1.APIResource{}
		}
		group.VersionedResources[gv.Version] = list.APIResources
		if !slices.ContainsFunc(group.Group.Versions, func(v metav1.GroupVersionForDiscovery) bool { return v.Version == gv.Version }) {
			v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
			// The first version is the preferred one.
			if g, ok := m.groups[gv.Group]; ok && g.PreferredVersion.Version == gv.Version {
				group.Group.Versions = append([]metav1.GroupVersionForDiscovery{v}, group.Group.Versions...)
			} else {
				group.Group.Versions = append(group.Group.Versions, v)
			}
		}
		m.known[gv.Group] = internedGroup(group)
	}
	m.mapper = internedMapper(m.known)
}

// interned holds what members share: API groups' resources and the
// mappers built from them, by the SHA-256 of their contents, for as long
// as a member holds them.
var interned = struct {
	mu      sync.Mutex
	lists   map[[sha256.Size]byte]weak.Pointer[metav1.APIGroupList]
	groups  map[[sha256.Size]byte]weak.Pointer[restmapper.APIGroupResources]
	mappers map[[sha256.Size]byte]weak.Pointer[sharedMapper]
}{
	lists:   map[[sha256.Size]byte]weak.Pointer[metav1.APIGroupList]{},
	groups:  map[[sha256.Size]byte]weak.Pointer[restmapper.APIGroupResources]{},
	mappers: map[[sha256.Size]byte]weak.Pointer[sharedMapper]{},
}

// sharedMapper is a mapper built from interned groups; the groups it was
// built from live as long as it does.
type sharedMapper struct {
	meta.RESTMapper
	groups []*restmapper.APIGroupResources
}

// internedGroupList returns the shared copy of list's contents, which
// becomes list if there is none.
func internedGroupList(list *metav1.APIGroupList) *metav1.APIGroupList {
	doc, err := json.Marshal(list)
	if err != nil {
		return list // not shared
	}
	return intern(interned.lists, sha256.Sum256(doc), func() *metav1.APIGroupList { return list })
}

// internedGroup returns the shared copy of group's contents, which
// becomes group if there is none.
func internedGroup(group *restmapper.APIGroupResources) *restmapper.APIGroupResources {
	doc, err := json.Marshal(group)
	if err != nil {
		return group // not shared
	}
	key := sha256.Sum256(doc)
	return intern(interned.groups, key, func() *restmapper.APIGroupResources { return group })
}

// internedMapper returns the shared mapper of the interned groups known.
func internedMapper(known map[string]*restmapper.APIGroupResources) meta.RESTMapper {
	groups := slices.SortedFunc(maps.Values(known), func(a, b *restmapper.APIGroupResources) int {
		return cmp.Compare(a.Group.Name, b.Group.Name)
	})
	h := sha256.New()
	for _, g := range groups {
		// Interned groups are shared by identity: their addresses
		// identify their contents.
		fmt.Fprintf(h, "%p\n", g)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return intern(interned.mappers, key, func() *sharedMapper {
		return &sharedMapper{RESTMapper: restmapper.NewDiscoveryRESTMapper(groups), groups: groups}
	})
}

// intern returns the value of key in table if it is still held, or
// stores and returns a new one.
func intern[T any](table map[[sha256.Size]byte]weak.Pointer[T], key [sha256.Size]byte, build func() *T) *T {
	interned.mu.Lock()
	defer interned.mu.Unlock()
	if v := table[key].Value(); v != nil {
		return v
	}
	v := build()
	wp := weak.Make(v)
	table[key] = wp
	runtime.AddCleanup(v, func(key [sha256.Size]byte) {
		interned.mu.Lock()
		defer interned.mu.Unlock()
		if table[key] == wp {
			delete(table, key)
		}
	}, key)
	return v
}
