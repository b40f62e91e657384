// Package copier copies a directory tree exactly and safely: the local provider's
// snapshots (a sandbox's writable layer and checkpoint image, out and back in) and
// restores. Linux only.
//
// Copy creates the destination, or merges into it: existing directories take the source's
// metadata, other existing entries are replaced. It keeps types, modes, owners (shifted by
// Options.Shift, for a sandbox in another user-namespace range), timestamps, xattrs
// (overlayfs's trusted.overlay.* included, but not origin, which names an inode of the old
// mount), symlinks as symlinks, hard links among the copied files, holes in sparse files,
// and device nodes (overlay whiteouts are 0/0 character devices).
//
// Its invariants, which make it safe on a tree that sandbox code owns and may change under
// the copy:
//
//   - Every lookup is relative to an open directory and never follows a symlink, so the
//     copy cannot be led out of the source or the destination.
//   - A regular file is opened without following and without blocking, and checked to be
//     the file that was listed: one that changed type under the copy is an error.
//   - A tree deeper than MaxDepth is refused (provider.CodeResourceExhausted): each level
//     holds two descriptors until its subtree is done.
//
// What a file's data becomes is the copier's unless Options.Blocks takes it (package
// blocks stores a snapshot's large files by content).
package copier
