//! Read and write halves of one connection's stream (a glommio TCP stream, or a TLS
//! stream over one), for the connection's reader and writer tasks on the same shard.
//! Each poll borrows the stream only for its duration, and both halves live on one
//! thread, so the borrows never overlap.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};

pub struct ReadHalf<S>(Rc<RefCell<S>>);
pub struct WriteHalf<S>(Rc<RefCell<S>>);

pub fn split<S>(stream: S) -> (ReadHalf<S>, WriteHalf<S>) {
    let s = Rc::new(RefCell::new(stream));
    (ReadHalf(s.clone()), WriteHalf(s))
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadHalf<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteHalf<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}
