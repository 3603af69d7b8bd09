package podvolume

// How a restored pod learns that its volumes' data is back (DESIGN.md section 16). The restore
// gives each pod whose volumes it restores an emptyDir volume, RestoreMarkerVolume, and a first
// init container, RestoreHelperContainer, that mounts it at RestoreMarkerMountPath and waits.
// The node agent, once it has written a volume, puts <volume>DoneMarkerSuffix there, or
// <volume>FailedMarkerSuffix holding the reason; the helper exits 0 when every volume is done
// and 1 with the reason when one failed, so the application never starts on an empty volume.
// The markers live in their own emptyDir, never in the application's volumes: nothing is left
// in the restored data, and the helper needs no right to read the application's files.
const (
	RestoreMarkerVolume    = "cairn-restore"
	RestoreMarkerMountPath = "/cairn-restore"
	RestoreHelperContainer = "cairn-restore-wait"
	DoneMarkerSuffix       = ".done"
	FailedMarkerSuffix     = ".failed"
)
