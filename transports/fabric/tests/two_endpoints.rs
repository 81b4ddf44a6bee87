//! Two ranks, as two threads of one process, talk over real providers: write with immediate data,
//! send/recv awaited as futures, and spans that are refused. Each thread owns its channel, as a rank does;
//! addresses and region keys cross between them as the bootstrap would carry them.

use std::rc::Rc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use efatop_fabric::{
    Capabilities, Channel, ChannelOptions, HostBuffer, Immediate, PeerAddress, Provider, RemoteRegion, block_on,
    discover_nics,
};

const LEN: usize = 65536;

fn open_with(provider: &Provider, caps: Capabilities) -> Channel {
    let nics = discover_nics(provider, caps).expect("discover");
    let options = ChannelOptions {
        index: 0,
        max_in_flight: 64,
        op_timeout: Duration::from_secs(10),
        remote_in_flight: 64,
        device_memory: false,
    };
    Channel::open(&nics[0], &options).expect("open")
}

/// Runs `rank0` and `rank1` on two threads after exchanging endpoint names; each gets its channel.
fn two_ranks(
    provider: Provider,
    rank0: impl FnOnce(Channel, mpsc::Receiver<Vec<u8>>, mpsc::Sender<Vec<u8>>) + Send + 'static,
    rank1: impl FnOnce(Channel, mpsc::Receiver<Vec<u8>>, mpsc::Sender<Vec<u8>>) + Send + 'static,
) {
    two_ranks_with(provider, Capabilities::MESSAGES_AND_WRITE, rank0, rank1);
}

fn two_ranks_with(
    provider: Provider,
    caps: Capabilities,
    rank0: impl FnOnce(Channel, mpsc::Receiver<Vec<u8>>, mpsc::Sender<Vec<u8>>) + Send + 'static,
    rank1: impl FnOnce(Channel, mpsc::Receiver<Vec<u8>>, mpsc::Sender<Vec<u8>>) + Send + 'static,
) {
    let (to1, from0) = mpsc::channel::<Vec<u8>>();
    let (to0, from1) = mpsc::channel::<Vec<u8>>();
    let provider_here = provider.clone();
    let second = thread::spawn(move || {
        let channel = open_with(&provider, caps);
        to0.send(channel.address().expect("name").0).expect("send name");
        let peer = PeerAddress(from0.recv().expect("peer name"));
        let own = channel.address().expect("name");
        channel.connect(&[peer, own]).expect("connect");
        rank1(channel, from0, to0);
    });
    let channel = open_with(&provider_here, caps);
    to1.send(channel.address().expect("name").0).expect("send name");
    let peer = PeerAddress(from1.recv().expect("peer name"));
    let own = channel.address().expect("name");
    channel.connect(&[own, peer]).expect("connect");
    rank0(channel, from1, to1);
    second.join().expect("rank 1 thread");
}

fn write_with_immediate(provider: Provider) {
    two_ranks(
        provider,
        |channel, from1, to1| {
            let src = Rc::new(HostBuffer::new(1 << 20).expect("src"));
            src.write(|bytes| bytes.iter_mut().enumerate().for_each(|(i, v)| *v = (i % 251) as u8));
            let mr = channel.register(src).expect("reg");
            let remote = RemoteRegion::from_bytes(&from1.recv().expect("region")).expect("decode");
            channel.write(1, &mr, 4096, LEN, remote, 8192, Some(Immediate::encode(0, 7))).expect("post").wait().expect("write");
            // Out-of-bounds spans are refused before anything is posted.
            assert!(channel.write(1, &mr, 0, 2 << 20, remote, 0, None).is_err());
            assert!(channel.write(1, &mr, 0, 4096, remote, remote.len - 100, None).is_err());
            assert!(channel.send(5, &mr, 0, 16).is_err(), "unknown rank");
            to1.send(vec![]).expect("done");
        },
        |channel, from0, to0| {
            let dst = Rc::new(HostBuffer::new(1 << 20).expect("dst"));
            let mr = channel.register(dst.clone()).expect("reg");
            to0.send(Channel::remote_region(&mr).to_bytes().to_vec()).expect("region");
            channel.wait_immediates(0, 1).expect("immediate");
            from0.recv().expect("done");
            dst.read(|bytes| {
                for i in 0..LEN {
                    assert_eq!(bytes[8192 + i], ((4096 + i) % 251) as u8, "byte {i}");
                }
                assert!(bytes[..8192].iter().all(|b| *b == 0));
                assert!(bytes[8192 + LEN..].iter().all(|b| *b == 0));
            });
            assert_eq!(channel.immediates_from(0), 1);
            assert_eq!(channel.immediates_from(1), 0);
        },
    );
}

fn send_recv_is_awaitable(provider: Provider) {
    two_ranks(
        provider,
        |channel, _from1, _to1| {
            let src = Rc::new(HostBuffer::new(LEN).expect("src"));
            src.write(|bytes| bytes.fill(0x5a));
            let mr = channel.register(src).expect("reg");
            let dst = Rc::new(HostBuffer::new(LEN).expect("dst"));
            let dst_mr = channel.register(dst.clone()).expect("reg");
            let reply = channel.recv(&dst_mr, 0, LEN).expect("recv");
            let sent = block_on(channel.send(1, &mr, 0, 1000).expect("send"));
            sent.expect("send completes");
            assert_eq!(block_on(reply).expect("reply").len, 1000);
            dst.read(|bytes| assert!(bytes[..1000].iter().all(|b| *b == 0xa5)));
        },
        |channel, _from0, _to0| {
            let dst = Rc::new(HostBuffer::new(LEN).expect("dst"));
            let mr = channel.register(dst.clone()).expect("reg");
            let received = block_on(channel.recv(&mr, 0, LEN).expect("recv")).expect("recv completes");
            assert_eq!(received.len, 1000);
            dst.read(|bytes| assert!(bytes[..1000].iter().all(|b| *b == 0x5a) && bytes[1000] == 0));
            dst.write(|bytes| bytes[..1000].fill(0xa5));
            channel.send(0, &mr, 0, 1000).expect("send").wait().expect("reply sent");
        },
    );
}

/// `try_write` never waits: the writer retries what the provider did not take (shm's EAGAIN while an
/// earlier transfer to the peer is in progress, or no free slot), and every write still lands, once.
fn try_writes_all_land(provider: Provider) {
    const WRITES: usize = 16;
    two_ranks(
        provider,
        |channel, from1, to1| {
            let src = Rc::new(HostBuffer::new(WRITES * LEN).expect("src"));
            src.write(|bytes| bytes.iter_mut().enumerate().for_each(|(i, v)| *v = (i % 253) as u8));
            let mr = channel.register(src).expect("reg");
            let remote = RemoteRegion::from_bytes(&from1.recv().expect("region")).expect("decode");
            assert!(channel.try_write(1, &mr, 0, 2 * WRITES * LEN, remote, 0, 0).is_err(), "span outside the region");
            let mut ops = Vec::new();
            let mut retries = 0u64;
            for k in 0..WRITES {
                loop {
                    match channel.try_write(1, &mr, k * LEN, LEN, remote, (k * LEN) as u64, Immediate::encode(0, k as u32)).expect("post") {
                        Some(op) => break ops.push(op),
                        None => retries += 1,
                    }
                    assert!(retries < 50_000_000, "the provider never took write {k}");
                }
            }
            for op in ops {
                op.wait().expect("write");
            }
            to1.send(vec![]).expect("done");
        },
        |channel, from0, to0| {
            let dst = Rc::new(HostBuffer::new(WRITES * LEN).expect("dst"));
            let mr = channel.register(dst.clone()).expect("reg");
            to0.send(Channel::remote_region(&mr).to_bytes().to_vec()).expect("region");
            channel.wait_immediates(0, WRITES as u64).expect("immediates");
            from0.recv().expect("done");
            dst.read(|bytes| assert!(bytes.iter().enumerate().all(|(i, v)| *v == (i % 253) as u8), "every byte once"));
            assert_eq!(channel.immediates_from(0), WRITES as u64);
        },
    );
}

/// Over tcp a write completes, by default, once the kernel has taken its bytes: it completes while the
/// target makes no progress at all. With `FI_DELIVERY_COMPLETE` (what `--completion auto` asks of tcp) it
/// completes only once the target's provider has received it, so it waits for the target's progress.
fn write_completes_without_the_target(delivery_complete: bool) -> bool {
    const SMALL: usize = 16 << 10;
    let (tell, told) = mpsc::channel::<bool>();
    let caps = Capabilities { delivery_complete, ..Capabilities::MESSAGES_AND_WRITE };
    two_ranks_with(
        Provider::Tcp,
        caps,
        move |channel, from1, to1| {
            assert_eq!(channel.nic().delivery_complete(), delivery_complete, "the answer keeps what was asked");
            let src = Rc::new(HostBuffer::new(SMALL).expect("src"));
            src.write(|bytes| bytes.fill(0x3c));
            let mr = channel.register(src).expect("reg");
            let remote = RemoteRegion::from_bytes(&from1.recv().expect("region")).expect("decode");
            // A first write while the target progresses sets the connection up (tcp connects on first use).
            channel.write(1, &mr, 0, SMALL, remote, 0, Some(Immediate::encode(0, 1))).expect("post").wait().expect("first write");
            from1.recv().expect("first write arrived");
            let op = channel.write(1, &mr, 0, SMALL, remote, 0, Some(Immediate::encode(0, 2))).expect("post");
            // The target sits in a blocking receive meanwhile: nothing progresses its endpoint.
            let until = std::time::Instant::now() + Duration::from_millis(500);
            while !op.is_complete() && std::time::Instant::now() < until {
                channel.progress().expect("progress");
            }
            tell.send(op.is_complete()).expect("tell");
            to1.send(vec![]).expect("go");
            op.wait().expect("the write completes once the target progresses");
            from1.recv().expect("checked");
        },
        |channel, from0, to0| {
            let dst = Rc::new(HostBuffer::new(SMALL).expect("dst"));
            let mr = channel.register(dst.clone()).expect("reg");
            to0.send(Channel::remote_region(&mr).to_bytes().to_vec()).expect("region");
            channel.wait_immediates(0, 1).expect("first immediate");
            to0.send(vec![]).expect("first write arrived");
            from0.recv().expect("go");
            channel.wait_immediates(0, 2).expect("second immediate");
            dst.read(|bytes| assert!(bytes.iter().all(|b| *b == 0x3c)));
            to0.send(vec![]).expect("checked");
        },
    );
    told.recv().expect("told")
}

#[test]
fn tcp_transmit_completion_needs_no_target() {
    assert!(write_completes_without_the_target(false), "a 16 KiB write fits the socket buffers and completes at once");
}

#[test]
fn tcp_delivery_completion_waits_for_the_target() {
    assert!(!write_completes_without_the_target(true), "FI_DELIVERY_COMPLETE completed a write the target never received");
}

#[test]
fn shm_try_write() {
    try_writes_all_land(Provider::Shm);
}

#[test]
fn shm_write_with_immediate() {
    write_with_immediate(Provider::Shm);
}

#[test]
fn tcp_write_with_immediate() {
    write_with_immediate(Provider::Tcp);
}

#[test]
fn shm_send_recv() {
    send_recv_is_awaitable(Provider::Shm);
}

#[test]
fn tcp_send_recv() {
    send_recv_is_awaitable(Provider::Tcp);
}

#[test]
fn missing_provider_is_named() {
    let err = discover_nics(&Provider::Efa, Capabilities::MESSAGES_AND_WRITE).expect_err("no efa here");
    assert!(err.to_string().contains("efa"), "{err}");
}
