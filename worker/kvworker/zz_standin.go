package kvworker

// DELETE AT MERGE. Stand-ins for the worker library's symbols that are not
// on this branch yet. At merge, replace this file's contents with:
//
//	type Copy = worker.Copy
//	var fenceCheck = worker.Fence
//	func runLibrary(ctx context.Context, cfg worker.Config, h worker.Handler) error {
//		w, err := worker.New(cfg, h)
//		if err != nil {
//			return err
//		}
//		return w.Run(ctx)
//	}

import (
	"context"
	"errors"

	"github.com/xce/xce/worker"
)

// Copy is worker.Copy: one copy of a task the worker holds.
type Copy struct {
	Task  string
	Role  worker.Role
	Epoch uint64
}

// fenceCheck is worker.Fence: an error once the copy may no longer write.
func fenceCheck(ctx context.Context) error { return ctx.Err() }

// runLibrary is worker.New + Run; the library is not on this branch.
func runLibrary(ctx context.Context, cfg worker.Config, h *Handler) error {
	return errors.New("kvworker: the worker library (worker.New) is not on this branch")
}
