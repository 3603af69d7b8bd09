// Package node runs Cairn as users do, as a pod, on a real one-node cluster: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet with containerd, kube-proxy,
// and CoreDNS as the cluster's DNS, brought up by hack/node-up.sh inside the network namespace
// cairn-node, from which no packet can leave the machine. The images (Cairn's manager, a static
// HTTP server as the app to back up, and voldata, an app that fills its volumes with known data
// for the node agent to copy) are built without Docker by 'make image'. Pods resolve Services'
// names and reach their cluster IPs as on any cluster (node_test.go shows it), so the chart is
// installed as it is anywhere and the node agents reach the manager's repository Service by
// the name the chart gives them.
//
// The test binary starts outside the namespace: TestMain brings the node up (or finds it
// running), imports the images, and runs the binary again inside the namespace, where the specs
// reach the API server and the pods. A node the suite started is stopped at the end, unless
// CAIRN_NODE_KEEP is set; one that already ran is left running.
//
// The restore specs of volume data (restore_test.go) restore one backed-up app under a
// namespace mapping, in place after its namespace is deleted, and while cancelling or killing
// the node agent; the disaster-recovery spec (restore_dr_test.go) restores it into a second
// control plane started by the test (envtest's kube-apiserver and etcd, kube-controller-manager),
// which shares only the S3 server: the manager binary runs as its operator, and its node agent
// (the manager binary's node-agent command) writes into a pods directory laid out as the
// kubelet's, the test binding the pod to a node and making its volume directories. The Velero
// spec (velero_test.go) restores the volume data of a real Velero file-system backup
// (testdata/velero/volumes, made on this node by hack/velero-volume-fixtures.sh) from a velero
// location on the S3 server.
//
// The suite is built only with the e2enode tag ('make test-node'), so that ./test/e2e/... does
// not bring a node up.
package node
