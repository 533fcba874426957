import triton


def call(
    kernel,
    num_kv_splits,
    seq_lens,
    num_head,
    num_kv_head,
    max_kv_splits,
    device_core_count,
    uneven_batch=None,
):
    # Restates TritonAttnBackend.get_num_kv_splits (srt/layers/attention/triton_backend.py):
    # num_group from the output/input lengths, MAX_NUM_SEQ from num_seq, one program.
    num_token, num_seq = num_kv_splits.shape[0], seq_lens.shape[0]
    num_group = num_token // num_seq
    assert num_group * num_seq == num_token, (
        f"num_seq({num_seq}), num_token({num_token}), something goes wrong!"
    )
    if num_seq < 256:
        schedule_seq = 256
    else:
        schedule_seq = triton.next_power_of_2(num_seq)
    kernel[(1,)](
        num_kv_splits,
        seq_lens,
        num_seq,
        num_group,
        num_head,
        num_kv_head,
        max_kv_splits,
        device_core_count,
        MAX_NUM_SEQ=schedule_seq,
        uneven_batch_ptr=uneven_batch,
    )
