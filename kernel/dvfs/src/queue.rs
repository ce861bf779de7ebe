//! A fixed-capacity FIFO (no allocation) for completed requests waiting to be polled.

/// At most `N` items; pushing onto a full queue drops the oldest (it cannot happen when each
/// domain has at most one completion queued, which the drivers guarantee).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fifo<T: Copy, const N: usize> {
    buf: [Option<T>; N],
    head: usize,
    len: usize,
}

impl<T: Copy, const N: usize> Fifo<T, N> {
    pub(crate) const fn new() -> Self {
        Fifo {
            buf: [None; N],
            head: 0,
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, item: T) {
        if N == 0 {
            return;
        }
        if self.len == N {
            self.head = (self.head + 1) % N;
            self.len -= 1;
        }
        self.buf[(self.head + self.len) % N] = Some(item);
        self.len += 1;
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let item = self.buf[self.head].take();
        self.head = (self.head + 1) % N;
        self.len -= 1;
        item
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}
