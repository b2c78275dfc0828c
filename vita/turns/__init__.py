"""A turn's life in the front: each session's ears (VAD, end of turn), its turn machine and the adapter that
carries out its actions, its mailbox thread, and the pacing of reply audio."""
