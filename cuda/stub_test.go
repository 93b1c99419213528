//go:build !cuda

package cuda

import (
	"errors"
	"testing"
)

func TestOpenWithoutTag(t *testing.T) {
	d, err := Open()
	if d != nil || !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Open() = %v, %v; want nil, ErrNotBuilt", d, err)
	}
}
