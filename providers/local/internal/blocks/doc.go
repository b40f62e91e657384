// Package blocks is the local provider's content-addressed block store: the large files of
// its snapshots (writable layers and checkpoint images) stored by content, so that ten
// snapshots (or the snapshots that carry ten forks) of one sandbox cost about one copy on
// disk. Linux only.
//
// A store lives in one directory; a file lock is shared by whoever writes or reads blocks
// and taken exclusively by the collector; its roots are the committed snapshot
// directories beside it, each with a manifest:
//
//	<dir>/<h[:2]>/<h>           a block: up to Size bytes of a file, named by its SHA-256
//	                            (hex); where blocks are cut is chosen by content (Lease.Put)
//	<dir>/.tmp-*                a block being written (renamed to its name once on disk)
//	<dir>/.gc-wanted            a collection is owed (see below)
//	<snapshots>/<id>/blocks.json the snapshot's Manifest: for each of its files stored as
//	                            blocks, the file's size and its blocks' hashes and lengths
//
// What goes into blocks is the caller's choice, file by file (Layer, with package copier:
// every regular file of at least MinFile bytes); the tree that is copied keeps an empty
// placeholder for each.
//
// Blocks end at page boundaries chosen by the content, not every Size bytes: the same
// data at another offset, as runsc's memory image is from one checkpoint to the next, then
// makes the same blocks. A run of zero pages is not stored: the manifest names it "", and
// a restore leaves a hole there (memory images and sparse files are mostly zeros). A block
// is written once: to a temporary file, synced, renamed to its hash; a block already there
// is not written again (nor read to check it). Reading a block checks its hash: a damaged
// block is an error, never wrong data.
//
// Nothing counts references: what a block is used by is derived from the committed
// manifests each time the collector runs, so no count can drift. The rules that make this
// safe against a crash at any moment (the first three are the snapshot writer's to keep):
//
//   - A snapshot is written under a temporary directory while its writer holds a Lease;
//     its manifest is written and synced after all its blocks are (Lease.Sync), and the
//     directory is renamed to its committed name before the lease is released. A crash
//     before the rename leaves blocks no committed manifest names: garbage.
//   - A restore holds a Lease while it reads blocks.
//   - Deleting a snapshot renames it out of sight and then removes it; its blocks become
//     garbage at the rename. A crash before the rename leaves the snapshot whole; after it,
//     gone. Owe is called before the rename.
//   - The collector (GC) takes the lock exclusively, so no snapshot is being written or
//     read; it reads every committed manifest (and collects nothing if one cannot be read),
//     then removes the blocks none names and the temporary files writers left. A crash in
//     the middle leaves garbage for the next run, never a missing block.
//
// The marker .gc-wanted is made before a snapshot is unlinked or a failed write abandoned
// (Owe), and when a collection starts, and removed when one completes: if the store is in
// use the collector does not wait, and whoever releases the lease next runs it; if a crash
// stops it (or the delete before it), the caller's next reap runs it (Owed).
package blocks
