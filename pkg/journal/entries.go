package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object names an object in a member.
type Object struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
}

// Copy is a copy the manager applied in a member.
type Copy struct {
	Object
	// Propagation names the Propagation, in the copy's namespace, whose
	// copy it is.
	Propagation string
	// Hash is the content hash of the hub object last applied.
	Hash string
	// Applied is when the entry was recorded.
	Applied time.Time
}

// copyPrefix starts the keys of a Propagation's copies, so that they are
// found by one seek.
func copyPrefix(namespace, propagation string) []byte {
	return []byte(namespace + "/" + propagation + "/")
}

func (c Copy) key() []byte {
	return append(copyPrefix(c.Namespace, c.Propagation), strings.Join([]string{c.GVK.Group, c.GVK.Version, c.GVK.Kind, c.Name}, "/")...)
}

type copyValue struct {
	Hash    string    `json:"hash"`
	Applied time.Time `json:"applied"`
}

func decodeCopy(k, v []byte) (Copy, error) {
	c, ok := decodeCopyKey(k)
	var cv copyValue
	if !ok || json.Unmarshal(v, &cv) != nil {
		return Copy{}, fmt.Errorf("invalid copy %q", k)
	}
	c.Hash, c.Applied = cv.Hash, cv.Applied
	return c, nil
}

// decodeCopyKey reads the copy a key names, and whether it names one.
func decodeCopyKey(k []byte) (Copy, bool) {
	parts := strings.Split(string(k), "/")
	if len(parts) != 6 || parts[1] == "" || parts[3] == "" || parts[4] == "" || parts[5] == "" {
		return Copy{}, false
	}
	return Copy{
		Object: Object{
			GVK:       schema.GroupVersionKind{Group: parts[2], Version: parts[3], Kind: parts[4]},
			Namespace: parts[0], Name: parts[5],
		},
		Propagation: parts[1],
	}, true
}

// storedHash is the hash a copy's value v holds, and whether v reads.
func storedHash(v []byte) (string, bool) {
	var cv copyValue
	if json.Unmarshal(v, &cv) != nil {
		return "", false
	}
	return cv.Hash, true
}

// Owed is a removal a member owes: the copies of a Propagation.
type Owed struct {
	Namespace, Propagation string
	// Kinds are the kinds its copies may have.
	Kinds []schema.GroupVersionKind
	// Reason says why the removal was not carried out when decided.
	Reason string
	// Decided is when the removal was first owed: Owe sets it to now
	// when it is zero.
	Decided time.Time
}

type owedValue struct {
	Kinds   []schema.GroupVersionKind `json:"kinds"`
	Reason  string                    `json:"reason"`
	Decided time.Time                 `json:"decided"`
}

func owedKey(namespace, propagation string) []byte {
	return []byte(namespace + "/" + propagation)
}

func decodeOwed(k, v []byte) (Owed, error) {
	namespace, name, ok := strings.Cut(string(k), "/")
	var ov owedValue
	if !ok || name == "" || json.Unmarshal(v, &ov) != nil {
		return Owed{}, fmt.Errorf("invalid owed removal %q", k)
	}
	return Owed{Namespace: namespace, Propagation: name, Kinds: ov.Kinds, Reason: ov.Reason, Decided: ov.Decided}, nil
}

// Record records copies in member, each before its first apply, and
// returns once they are on disk. Copies recorded already with the same
// Propagation and hash cost no write.
func (j *Journal) Record(member string, copies []Copy) error {
	if err := validMember(member); err != nil {
		return err
	}
	keys := make([][]byte, len(copies))
	for i, c := range copies {
		keys[i] = c.key()
		if _, ok := decodeCopyKey(keys[i]); !ok {
			return fmt.Errorf("invalid copy %q", keys[i]) // a key that would not read back
		}
	}
	var changed []int
	if err := j.view(func(tx *bolt.Tx) error {
		b, _ := memberBucket(tx, copiesBucket, member, false)
		for i, c := range copies {
			if b != nil {
				if hash, ok := storedHash(b.Get(keys[i])); ok && hash == c.Hash {
					continue
				}
			}
			changed = append(changed, i)
		}
		return nil
	}); err != nil || len(changed) == 0 {
		return err
	}
	now := j.opts.Now().UTC()
	return j.batch(func(tx *bolt.Tx) error {
		b, err := memberBucket(tx, copiesBucket, member, true)
		if err != nil {
			return err
		}
		for _, i := range changed {
			v, err := json.Marshal(copyValue{Hash: copies[i].Hash, Applied: now})
			if err != nil {
				return err
			}
			if err := b.Put(keys[i], v); err != nil {
				return err
			}
		}
		return nil
	})
}

// Forget removes copies the member confirmed gone, or let go.
func (j *Journal) Forget(member string, copies []Copy) error {
	if len(copies) == 0 {
		return nil
	}
	known := false
	if err := j.view(func(tx *bolt.Tx) error {
		b, _ := memberBucket(tx, copiesBucket, member, false)
		known = b != nil && slices.ContainsFunc(copies, func(c Copy) bool { return b.Get(c.key()) != nil })
		return nil
	}); err != nil || !known {
		return err
	}
	return j.batch(func(tx *bolt.Tx) error {
		b, _ := memberBucket(tx, copiesBucket, member, false)
		if b == nil {
			return nil
		}
		for _, c := range copies {
			if err := b.Delete(c.key()); err != nil {
				return err
			}
		}
		return nil
	})
}

// Owe records that member owes the removal of a Propagation's copies, and
// returns once it is on disk. A removal owed already keeps its reason and
// time, and gains kinds.
func (j *Journal) Owe(member string, o Owed) error {
	if err := validMember(member); err != nil {
		return err
	}
	if _, err := decodeOwed(owedKey(o.Namespace, o.Propagation), []byte("{}")); err != nil {
		return err // a key that would not read back
	}
	k := owedKey(o.Namespace, o.Propagation)
	decided := o.Decided.UTC()
	if o.Decided.IsZero() {
		decided = j.opts.Now().UTC()
	}
	merge := func(old *owedValue) (owedValue, bool) {
		if old == nil {
			return owedValue{Kinds: o.Kinds, Reason: o.Reason, Decided: decided}, true
		}
		merged, grew := *old, false
		for _, gvk := range o.Kinds {
			if !slices.Contains(merged.Kinds, gvk) {
				merged.Kinds, grew = append(merged.Kinds, gvk), true
			}
		}
		return merged, grew
	}
	read := func(b *bolt.Bucket) *owedValue {
		if b == nil {
			return nil
		}
		var old owedValue
		if v := b.Get(k); v == nil || json.Unmarshal(v, &old) != nil {
			return nil
		}
		return &old
	}
	needed := true
	if err := j.view(func(tx *bolt.Tx) error {
		b, _ := memberBucket(tx, owedBucket, member, false)
		_, needed = merge(read(b))
		return nil
	}); err != nil || !needed {
		return err
	}
	return j.batch(func(tx *bolt.Tx) error {
		b, err := memberBucket(tx, owedBucket, member, true)
		if err != nil {
			return err
		}
		ov, changed := merge(read(b))
		if !changed {
			return nil
		}
		v, err := json.Marshal(ov)
		if err != nil {
			return err
		}
		return b.Put(k, v)
	})
}

// Settle records that member holds of a Propagation's copies only those
// in keep: its owed removal, if any, and its other copies' entries go.
func (j *Journal) Settle(member, namespace, propagation string, keep []Object) error {
	kept := make(map[Object]bool, len(keep))
	for _, o := range keep {
		kept[o] = true
	}
	settles := func(tx *bolt.Tx, each func(b *bolt.Bucket, k []byte) error) error {
		k := owedKey(namespace, propagation)
		if b, _ := memberBucket(tx, owedBucket, member, false); b != nil && b.Get(k) != nil {
			if err := each(b, k); err != nil {
				return err
			}
		}
		b, _ := memberBucket(tx, copiesBucket, member, false)
		if b == nil {
			return nil
		}
		prefix := copyPrefix(namespace, propagation)
		var gone [][]byte
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if cp, err := decodeCopy(k, v); err != nil || !kept[cp.Object] {
				gone = append(gone, slices.Clone(k))
			}
		}
		for _, k := range gone {
			if err := each(b, k); err != nil {
				return err
			}
		}
		return nil
	}
	found := false
	if err := j.view(func(tx *bolt.Tx) error {
		return settles(tx, func(*bolt.Bucket, []byte) error { found = true; return nil })
	}); err != nil || !found {
		return err
	}
	return j.batch(func(tx *bolt.Tx) error {
		return settles(tx, func(b *bolt.Bucket, k []byte) error { return b.Delete(k) })
	})
}

// ForgetMember removes every entry of a member that left the fleet, and
// when it left.
func (j *Journal) ForgetMember(member string) error {
	found := false
	if err := j.view(func(tx *bolt.Tx) error {
		for _, top := range [][]byte{copiesBucket, owedBucket} {
			if b, _ := memberBucket(tx, top, member, false); b != nil {
				found = true
			}
		}
		found = found || tx.Bucket(metaBucket).Get(departedKey(member)) != nil
		return nil
	}); err != nil || !found {
		return err
	}
	return j.batch(func(tx *bolt.Tx) error {
		for _, top := range [][]byte{copiesBucket, owedBucket} {
			if err := tx.Bucket(top).DeleteBucket([]byte(member)); err != nil && err != bolt.ErrBucketNotFound {
				return err
			}
		}
		return tx.Bucket(metaBucket).Delete(departedKey(member))
	})
}

// departedPrefix starts the keys, in the meta bucket, of when members
// left the fleet. The meta bucket holds them, not a bucket of their own,
// so that the previous version, whose layout check refuses unknown
// buckets, still reads a journal of this one.
const departedPrefix = "departed/"

func departedKey(member string) []byte { return []byte(departedPrefix + member) }

// Depart records that member left the fleet at since, unless it is
// recorded as gone already: the earlier time stays. Its entries stay
// until ForgetMember.
func (j *Journal) Depart(member string, since time.Time) error {
	if err := validMember(member); err != nil {
		return err
	}
	v, err := since.UTC().MarshalText()
	if err != nil {
		return err
	}
	earlier := func(tx *bolt.Tx) bool {
		var old time.Time
		cur := tx.Bucket(metaBucket).Get(departedKey(member))
		return cur != nil && old.UnmarshalText(cur) == nil && !old.After(since)
	}
	recorded := false
	if err := j.view(func(tx *bolt.Tx) error { recorded = earlier(tx); return nil }); err != nil || recorded {
		return err
	}
	return j.batch(func(tx *bolt.Tx) error {
		if earlier(tx) {
			return nil
		}
		return tx.Bucket(metaBucket).Put(departedKey(member), v)
	})
}

// Return records that member is in the fleet: it is no longer gone.
func (j *Journal) Return(member string) error {
	gone := false
	if err := j.view(func(tx *bolt.Tx) error {
		gone = tx.Bucket(metaBucket).Get(departedKey(member)) != nil
		return nil
	}); err != nil || !gone {
		return err
	}
	return j.batch(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Delete(departedKey(member)) })
}

// Departed returns when each member recorded as gone left the fleet.
func (j *Journal) Departed() (map[string]time.Time, error) {
	departed := map[string]time.Time{}
	err := j.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(metaBucket).Cursor()
		prefix := []byte(departedPrefix)
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			since, err := decodeDeparted(k, v)
			if err != nil {
				return err
			}
			departed[string(k[len(prefix):])] = since
		}
		return nil
	})
	return departed, err
}

func decodeDeparted(k, v []byte) (time.Time, error) {
	var since time.Time
	if len(k) == len(departedPrefix) || since.UnmarshalText(v) != nil {
		return time.Time{}, fmt.Errorf("invalid departure %q", k)
	}
	return since, nil
}

// Copies returns the copies recorded in member.
func (j *Journal) Copies(member string) ([]Copy, error) { return j.copies(member, nil) }

// CopiesOf returns the copies of one Propagation recorded in member.
func (j *Journal) CopiesOf(member, namespace, propagation string) ([]Copy, error) {
	return j.copies(member, copyPrefix(namespace, propagation))
}

// KindsOf returns the kinds of the copies of one Propagation recorded in
// member, each once: CopiesOf's kinds, without decoding each entry.
func (j *Journal) KindsOf(member, namespace, propagation string) ([]schema.GroupVersionKind, error) {
	var kinds []schema.GroupVersionKind
	err := j.view(func(tx *bolt.Tx) error {
		b, _ := memberBucket(tx, copiesBucket, member, false)
		if b == nil {
			return nil
		}
		prefix := copyPrefix(namespace, propagation)
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			cp, ok := decodeCopyKey(k)
			if !ok {
				return fmt.Errorf("invalid copy %q", k)
			}
			if !slices.Contains(kinds, cp.GVK) {
				kinds = append(kinds, cp.GVK)
			}
		}
		return nil
	})
	return kinds, err
}

func (j *Journal) copies(member string, prefix []byte) ([]Copy, error) {
	var copies []Copy
	err := j.view(func(tx *bolt.Tx) error {
		b, _ := memberBucket(tx, copiesBucket, member, false)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			cp, err := decodeCopy(k, v)
			if err != nil {
				return err
			}
			copies = append(copies, cp)
		}
		return nil
	})
	return copies, err
}

// Owed returns the removals member owes, oldest first.
func (j *Journal) Owed(member string) ([]Owed, error) {
	var owed []Owed
	err := j.view(func(tx *bolt.Tx) error {
		b, _ := memberBucket(tx, owedBucket, member, false)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			o, err := decodeOwed(k, v)
			if err != nil {
				return err
			}
			owed = append(owed, o)
			return nil
		})
	})
	slices.SortStableFunc(owed, func(a, b Owed) int { return a.Decided.Compare(b.Decided) })
	return owed, err
}

// Members lists the members with entries.
func (j *Journal) Members() ([]string, error) {
	var members []string
	err := j.view(func(tx *bolt.Tx) error {
		for _, top := range [][]byte{copiesBucket, owedBucket} {
			if err := tx.Bucket(top).ForEachBucket(func(k []byte) error {
				if !slices.Contains(members, string(k)) {
					members = append(members, string(k))
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	slices.Sort(members)
	return members, err
}
