//go:build !(linux && amd64)

package cpu

import "errors"

// requestTilePermission: the AMX kernels are enabled on linux/amd64 only,
// where the OS hands out the tile state on request.
func requestTilePermission() error {
	return errors.New("the AMX kernels run on linux/amd64 only")
}
