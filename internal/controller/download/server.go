package download

import (
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/download"
)

// StartServer binds the download server for filesystem locations at bindAddress
// (--download-bind-address; "" or "0" runs none) and adds it to mgr, which serves on every
// replica; it returns the signer of its URLs and the base clients reach it by (urlBase, or
// http://<the bound address> when ""), nil and "" without a server. Without signingKey the key
// is new in every process: a URL works only on the replica that signed it, until it restarts.
func StartServer(mgr ctrl.Manager, bindAddress, urlBase string, signingKey []byte, clk clock.Clock, st stores.Stores) (*download.Signer, string, error) {
	if bindAddress == "" || bindAddress == "0" {
		return nil, "", nil
	}
	var signer *download.Signer
	var err error
	if signingKey != nil {
		signer, err = download.NewSigner(signingKey)
	} else {
		signer, err = download.NewRandomSigner()
	}
	if err != nil {
		return nil, "", err
	}
	srv, err := download.Listen(bindAddress, urlBase)
	if err != nil {
		return nil, "", err
	}
	srv.Signer, srv.Open, srv.Clock = signer, st.OpenForDownload, clk
	srv.Log = mgr.GetLogger().WithName("download")
	if err := mgr.Add(srv); err != nil {
		return nil, "", fmt.Errorf("adding the download server: %w", err)
	}
	return signer, srv.Base(), nil
}
