package x11

import (
	"github.com/jezek/xgb"
	"github.com/jezek/xgb/shm"
	"golang.org/x/sys/unix"
)

// shmSegment is a System V shared memory segment the X server writes
// captures into, saving the copy through the socket (≈ 4 MB per frame).
type shmSegment struct {
	seg shm.Seg
	mem []byte
}

// attachSHM creates a segment of size bytes and has the X server attach
// it; nil when any step fails — no MIT-SHM, or a server in another IPC
// namespace or of another user (then it cannot see or open the segment).
func attachSHM(conn *xgb.Conn, size int) *shmSegment {
	if shm.Init(conn) != nil {
		return nil
	}
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
	if err != nil {
		return nil
	}
	// Marked for removal once both sides have attached (or failed), so the
	// segment never outlives this process and the X server's attachment.
	defer unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	mem, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		return nil
	}
	seg, err := shm.NewSegId(conn)
	if err == nil {
		err = shm.AttachChecked(conn, seg, uint32(id), false).Check()
	}
	if err != nil {
		unix.SysvShmDetach(mem)
		return nil
	}
	return &shmSegment{seg: seg, mem: mem}
}

func (s *shmSegment) detach(conn *xgb.Conn) {
	shm.Detach(conn, s.seg)
	unix.SysvShmDetach(s.mem)
}
