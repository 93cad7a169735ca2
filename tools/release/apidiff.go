package main

import (
	"context"
	"io"
)

func runAPIDiff(ctx context.Context, root string, v *Versions, w io.Writer) error { return nil }
