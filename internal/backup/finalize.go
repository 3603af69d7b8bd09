package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/storage"
)

// AddPostOperationItems rebuilds a backup's archive with the items that completed operations
// named, as they are now (a VolumeSnapshot that became ready, say): every other entry is
// copied, an earlier copy of such an item is replaced. The new archive goes to the same key in
// one Put, which replaces the old one only once it is complete. Items that are gone are
// returned as warnings; items the backup may not hold (the backup's Selection decides, as for
// every other item: no cluster-scoped item in a team's backup) are left out.
func (r *Runner) AddPostOperationItems(ctx context.Context, b *cairnv1.Backup, operatorNamespace string, store storage.ObjectStore, keys storage.BackupKeys, resources []Resource, ids []ItemID) (storage.ArchiveDigest, []string, error) {
	sel, _, err := NewSelection(b, operatorNamespace, resources, nil)
	if err != nil {
		return storage.ArchiveDigest{}, nil, err
	}
	byGR := map[string]Resource{}
	for _, res := range resources {
		byGR[res.GroupResource().String()] = res
	}
	type fetched struct {
		path string
		data []byte
	}
	var items []fetched
	var warnings []string
	replaced := map[string]bool{}
	for _, id := range ids {
		res, ok := byGR[id.GroupResource.String()]
		if !ok {
			warnings = append(warnings, fmt.Sprintf("post-operation item %s: the cluster does not serve %s", id, id.GroupResource))
			continue
		}
		if !sel.Includes(res, id.Namespace, id.Name, nil, PostOperation) {
			continue
		}
		client := r.Dynamic.Resource(res.GroupVersionResource)
		get := client.Get
		if res.Namespaced {
			get = client.Namespace(id.Namespace).Get
		}
		item, err := get(ctx, id.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			warnings = append(warnings, fmt.Sprintf("post-operation item %s is gone", id))
			continue
		}
		if err != nil {
			return storage.ArchiveDigest{}, warnings, fmt.Errorf("getting post-operation item %s: %w", id, err)
		}
		if !sel.Includes(res, id.Namespace, id.Name, item.GetLabels(), PostOperation) {
			continue
		}
		data, err := json.Marshal(item.Object)
		if err != nil {
			return storage.ArchiveDigest{}, warnings, err
		}
		path := archive.ItemPath(id.Resource, id.Group, id.Namespace, id.Name)
		if !replaced[path] {
			replaced[path] = true
			items = append(items, fetched{path, data})
		}
	}

	old, err := store.Get(ctx, keys.Archive)
	if err != nil {
		return storage.ArchiveDigest{}, warnings, fmt.Errorf("reading the archive: %w", err)
	}
	defer old.Close()
	pr, pw := io.Pipe()
	go func() {
		aw, err := archive.NewWriter(pw, r.clock().Now())
		if err == nil {
			err = archive.Each(old, func(e archive.Entry) error {
				if e.Name == archive.VersionPath || replaced[e.Name] {
					return nil
				}
				return aw.AddEntry(e.Name, e.Data)
			})
		}
		for _, it := range items {
			if err != nil {
				break
			}
			err = aw.AddEntry(it.path, it.data)
		}
		if err == nil {
			err = aw.Close()
		}
		_ = pw.CloseWithError(err)
	}()
	digest, err := storage.PutArchive(ctx, store, keys.Archive, pr)
	_ = pr.CloseWithError(err)
	return digest, warnings, err
}
