//! What the changelog's records carry on the wire besides their key and value: the headers
//! that frame records into commits and stamp them with their writer's epoch. The producer
//! writes them and the reader reads them.

/// The record header that frames a record into a commit: value [`FRAMED`] for an update
/// inside a commit, [`MARKER`] for a commit marker. Records without it are unframed (all
/// records written before framing). Three bytes of name keep the cost per record small.
pub const FRAME_HEADER: &str = "ssf";
/// [`FRAME_HEADER`]'s value on an update inside a commit.
pub const FRAMED: &[u8] = b"f";
/// [`FRAME_HEADER`]'s value on a commit marker.
pub const MARKER: &[u8] = b"c";

/// The header carrying the writer epoch of a record (8 bytes, big-endian), on records appended
/// under an epoch above 0 (see "Fencing" in [`Changelog`](crate::Changelog)).
pub const EPOCH_HEADER: &str = "sse";
