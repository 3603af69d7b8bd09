package location

import (
	"fmt"
	"path"
	"sort"
	"strings"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// space is where a location keeps its objects: a store (the provider, the S3 endpoint and
// bucket) and a root inside it (the directory, or the key prefix).
type space struct {
	store string
	root  string
}

// spaceOf is a location's space. A filesystem location's root is config.path joined with its
// prefix; an S3 location's is its prefix in the bucket (the endpoint taken as written: two
// spellings of one server are not recognised as one).
func spaceOf(bsl *cairnv1.BackupStorageLocation) space {
	var bucket, prefix string
	if bsl.Spec.ObjectStorage != nil {
		bucket, prefix = bsl.Spec.ObjectStorage.Bucket, bsl.Spec.ObjectStorage.Prefix
	}
	prefix = strings.Trim(path.Clean("/"+prefix), "/")
	if bsl.Spec.Provider == cairnv1.StorageProviderFilesystem {
		return space{store: "filesystem", root: strings.TrimPrefix(path.Join(path.Clean(bsl.Spec.Config[cairnv1.ConfigKeyPath]), prefix), "/")}
	}
	endpoint := strings.TrimRight(strings.ToLower(bsl.Spec.Config[cairnv1.ConfigKeyEndpoint]), "/")
	if bsl.Spec.Provider == cairnv1.StorageProviderAzure {
		// Containers are the storage account's: the same container name in two accounts is two.
		endpoint += " " + bsl.Spec.Config[cairnv1.ConfigKeyStorageAccount]
	}
	return space{store: string(bsl.Spec.Provider) + " " + endpoint + " " + bucket, root: prefix}
}

// nests reports whether one root is the other, or lies inside it ("a" and "a/b" nest; "a" and
// "ab" do not; the empty root holds everything).
func nests(a, b string) bool {
	if a == b || a == "" || b == "" {
		return true
	}
	return strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// Nested returns the locations among locs whose objects nest with bsl's — the same directory
// or bucket prefix, or one inside the other — and that bsl must give way to: those created
// before it (by creation time, then name). Deleting a backup of one such location could
// remove another's objects, so bsl is refused while any is returned; the older location
// stays usable.
func Nested(locs []cairnv1.BackupStorageLocation, bsl *cairnv1.BackupStorageLocation) []string {
	mine := spaceOf(bsl)
	var names []string
	for i := range locs {
		other := &locs[i]
		if other.UID == bsl.UID && other.Name == bsl.Name || other.DeletionTimestamp != nil {
			continue
		}
		theirs := spaceOf(other)
		if theirs.store != mine.store || !nests(mine.root, theirs.root) || !olderThan(other, bsl) {
			continue
		}
		names = append(names, other.Name)
	}
	sort.Strings(names)
	return names
}

func olderThan(a, b *cairnv1.BackupStorageLocation) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// NestedError is the validation error of a location refused by Nested.
func NestedError(others []string) error {
	return fmt.Errorf("%w: its objects would nest with those of storage location %s (the same bucket or directory, and one prefix inside the other); deleting a backup of one could remove the other's objects: give it its own prefix",
		ErrConfig, strings.Join(others, ", "))
}

// TenantMessage says that a storage location cannot be used, naming nothing of its
// configuration (no endpoint, bucket, path, Secret or key): it is what a Backup's status and
// events say to a team outside the operator's namespace. The location's own status keeps the
// details for the administrators.
func TenantMessage(name string) string {
	return fmt.Sprintf("storage location %s cannot be used now; an administrator can see why in its status", name)
}
