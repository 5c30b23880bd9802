package app

import (
	"testing"

	"github.com/go-logr/logr"
)

func TestSetMemoryLimitRatio(t *testing.T) {
	for _, tc := range []struct {
		ratio   float64
		wantErr bool
	}{
		{ratio: 0},
		{ratio: -0.1, wantErr: true},
		{ratio: 1.5, wantErr: true},
	} {
		if err := setMemoryLimit(tc.ratio, logr.Discard()); (err != nil) != tc.wantErr {
			t.Errorf("setMemoryLimit(%v) = %v, want error %v", tc.ratio, err, tc.wantErr)
		}
	}
}
